"""Queue models and databases named on a management command's line (``app_label.Model``,
``--database ALIAS``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import apps
from django.core.management.base import CommandError, CommandParser
from django.db import connections
from django.utils.connection import ConnectionDoesNotExist

from dbqueue_django.models import BaseQueueModel, is_queue_model, queue_models


def queue_model(label: str) -> type[BaseQueueModel]:
    """The queue model ``label`` names, or a CommandError saying what it is instead."""
    try:
        model = apps.get_model(label)
    except (LookupError, ValueError):
        raise CommandError(f"{label!r} is not an installed model (app_label.Model)") from None
    if not is_queue_model(model):
        raise CommandError(
            f"{label!r} is not a queue model (a QueueModel or RingQueueModel subclass)"
        )
    return model


def named_queue_models(labels: Sequence[str]) -> list[type[BaseQueueModel]]:
    """The queue models ``labels`` name, each once, in order; with none, every installed
    queue model, by label."""
    if labels:
        return [queue_model(label) for label in dict.fromkeys(labels)]
    return sorted(queue_models(), key=lambda m: m._meta.label)


def add_group_option(parser: CommandParser) -> None:
    """``--group NAME``: the consumer group a command acts on, for a queue with groups."""
    parser.add_argument(
        "--group",
        default=None,
        metavar="NAME",
        help="the consumer group to act on, for a queue with groups (QueueOptions.groups)",
    )


def group_queue(model: type[BaseQueueModel], alias: str | None, group: str | None) -> Any:
    """``model``'s queue on ``alias`` (None: the router's choice), as consumer group ``group``
    sees it; a CommandError for a group the queue does not have, and for no group on a queue
    that has groups (each acts on its own deliveries)."""
    queue = model.queue.using(alias) if alias else model.queue
    groups: tuple[str, ...] = queue.spec.options.groups
    label = model._meta.label
    if group is None and groups:
        raise CommandError(
            f"{label} delivers each item to each of its consumer groups ({', '.join(groups)}): "
            f"name the one to act on with --group"
        )
    if group is None:
        return queue
    if group not in groups:
        has = f"the consumer groups {', '.join(groups)}" if groups else "no consumer groups"
        raise CommandError(f"--group {group!r}: {label} has {has}")
    return queue.group(group)


def database_alias(alias: str | None) -> str | None:
    """``alias`` if settings.DATABASES has it (None passes: the router's choice), or a
    CommandError."""
    if alias is None:
        return None
    try:
        connections[alias]
    except ConnectionDoesNotExist:
        known = ", ".join(connections) or "none"
        raise CommandError(
            f"no database alias {alias!r} in settings.DATABASES (aliases: {known})"
        ) from None
    return alias
