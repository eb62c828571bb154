"""Queue models named on a management command's line (``app_label.Model``)."""

from __future__ import annotations

from django.apps import apps
from django.core.management.base import CommandError

from dbqueue_django.models import BaseQueueModel, is_queue_model


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
