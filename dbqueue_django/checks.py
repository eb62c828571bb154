"""System checks: a bad queue declaration or an unsupported database is reported by
``manage.py check`` (and every management command) with a message naming what to change.

Ring queues are checked like split queues (their spec refuses a missing capacity, relations,
unique or indexed payload fields, unique items); ``check --database`` also compares each
ring's slots in the database with its declared capacity. A split queue's unique items
(``unique``, ``unique_scope``, ``unique_period``) are checked with its other options: a
``unique`` name that is not a payload field, an unknown scope, a period of part seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, register
from django.core.checks import Warning as CheckWarning
from django.db import connections, router

from dbqueue.errors import InvalidSpec, QueueTableMissing, RingCapacityMismatch, UnsupportedDatabase
from dbqueue_django.executor import dialect_for
from dbqueue_django.models import queue_models, ring_models
from dbqueue_django.spec import spec_for_model


@register(Tags.models)
def check_queue_models(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    for model in queue_models(app_configs):
        try:
            spec_for_model(model)
        except InvalidSpec as exc:
            errors.append(
                Error(
                    str(exc),
                    hint="Rename the field or table (lower-case letters, digits, underscores), "
                    "or fix the field or the QueueOptions.",
                    obj=model,
                    id="dbqueue.E001",
                )
            )
        for alias in settings.DATABASES:
            if not router.allow_migrate_model(alias, model):
                continue
            try:
                dialect_for(connections[alias])
            except UnsupportedDatabase as exc:
                errors.append(
                    Error(
                        str(exc),
                        hint="Route this queue model to a PostgreSQL or SQLite database "
                        "with a database router (allow_migrate).",
                        obj=model,
                        id="dbqueue.E002",
                    )
                )
    return errors


@register(Tags.database)
def check_ring_capacity(
    app_configs: Sequence[AppConfig] | None = None,
    databases: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[CheckMessage]:
    """A ring whose table has another number of slots than it declares (a warning, not an
    error: ``migrate`` runs the database checks before applying the migration that fixes it)."""
    warnings: list[CheckMessage] = []
    for alias in databases or ():
        for model in ring_models(app_configs):
            if not router.allow_migrate_model(alias, model):
                continue
            try:
                model.queue.using(alias).check()
            except (InvalidSpec, UnsupportedDatabase, QueueTableMissing):
                continue  # reported above, or migrations not applied yet
            except RingCapacityMismatch as exc:
                warnings.append(
                    CheckWarning(
                        f"{exc} (database {alias!r})",
                        hint="Run makemigrations and migrate; a ring's capacity changes only "
                        "while it is empty.",
                        obj=model,
                        id="dbqueue.W001",
                    )
                )
    return warnings
