"""The Django Tasks task of the django-tasks-db system (``bench.systems.django_tasks``).

Importing this module needs a configured Django (``@task`` validates against the backend), so
the system imports it after ``setup_django``; the worker finds it again by its module path.
"""

from __future__ import annotations

from collections.abc import Callable

from django.tasks import task

#: Set by a steady-state consumer (``serve``) to the harness's handler; None otherwise, and the
#: task is a no-op.
HANDLER: Callable[[str], None] | None = None


@task
def noop(payload: str) -> None:
    """The benchmark's task: takes the 300-character string and does nothing with it."""
    if HANDLER is not None:
        HANDLER(payload)
