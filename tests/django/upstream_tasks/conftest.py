"""Django's own Tasks tests (``vendor/tasks``) run against DBQueueBackend: how they are
collected, on which databases, and which are left out and why.

* Each test class runs twice: on PostgreSQL (``default``), and on SQLite, with a router that
  puts the backend's tables there (``...OnSQLite``). Both are marked ``django_tasks``, and
  ``postgresql`` or ``sqlite``.
* The tests that do not apply to a worker backend are deselected (:data:`NOT_APPLICABLE`,
  each with its reason), so every run counts them.
* Django 5.2 has no ``django.tasks``, so the vendored modules cannot even be imported: there,
  each module is collected as one item marked ``django_tasks`` that fails when run. The Django
  5.2 suite deselects them (``-m "not django_tasks"``, SUITES in scripts/run_tests.py), so
  they are counted as deselected, never skipped unseen.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HAS_TASKS = importlib.util.find_spec("django.tasks") is not None
VENDOR = Path(__file__).parent / "vendor"

#: The vendored tests that do not apply to a worker backend, by file::class(::test), and why.
NOT_APPLICABLE: dict[str, str] = {
    "test_custom_backend.py::CustomBackendTestCase": (
        "tests the backends the file defines itself (BaseTaskBackend subclasses): no test in "
        "it reaches DBQueueBackend"
    ),
    "test_custom_backend.py::CustomTaskTestCase": (
        "tests a custom Task class on a backend the file defines itself, not DBQueueBackend"
    ),
    "test_immediate_backend.py::ImmediateBackendTestCase::test_cannot_get_result": (
        "the immediate backend has no get_result(); DBQueueBackend has one "
        "(supports_get_result), which the other tests use throughout"
    ),
    "test_immediate_backend.py::ImmediateBackendTestCase::test_cannot_refresh_result": (
        "the immediate backend cannot refresh a result; DBQueueBackend can (supports_get_result)"
    ),
    "test_immediate_backend.py::ImmediateBackendTestCase::test_cannot_pass_run_after": (
        "the immediate backend refuses run_after; DBQueueBackend defers tasks (supports_defer)"
    ),
    "test_immediate_backend.py::ImmediateBackendTestCase::test_throws_keyboard_interrupt": (
        "the immediate backend runs the task in the caller's thread and lets a Ctrl-C through "
        "to the caller; a worker runs it in a thread of its own, where a KeyboardInterrupt "
        "can only be the task's own exception, and it fails the task (tests/django/test_tasks.py)"
    ),
    "test_immediate_backend.py::ImmediateBackendTransactionTestCase": (
        "the immediate backend runs the task inside the caller's transaction; DBQueueBackend "
        "writes it in that transaction, and a worker runs it once it commits "
        "(tests/django/test_tasks.py::test_enqueue_joins_the_callers_transaction)"
    ),
}
#: What Django refuses to any database-backed backend: the synchronous API (get_result(),
#: refresh(), the dummy's results) called inside an async test, that is, from an event loop
#: (SynchronousOnlyOperation). Only an in-memory backend passes these; the async API they go
#: with (aenqueue, aget_result, arefresh) is covered by their async neighbours.
SYNC_CALL_IN_ASYNC_TEST = (
    "calls the synchronous API inside an async test: Django refuses database queries in an "
    "event loop"
)
NOT_APPLICABLE.update(
    dict.fromkeys(
        [
            "test_tasks.py::TaskTestCase::test_enqueue_task_async",
            "test_tasks.py::TaskTestCase::test_refresh_result",
            "test_tasks.py::TaskTestCase::test_get_missing_result",
            "test_dummy_backend.py::DummyBackendTestCase::test_enqueue_task_async",
            "test_dummy_backend.py::DummyBackendTestCase::test_get_missing_result",
        ],
        SYNC_CALL_IN_ASYNC_TEST,
    )
)


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> Any:
    """A vendored module, marked ``django`` and ``django_tasks`` (every test in it too)."""
    if not module_path.is_relative_to(VENDOR):
        return None
    kind = pytest.Module if HAS_TASKS else NoDjangoTasks
    module = kind.from_parent(parent, path=module_path)
    module.add_marker(pytest.mark.django)
    module.add_marker(pytest.mark.django_tasks)
    return module


class NoDjangoTasks(pytest.File):
    """A vendored test module on a Django without django.tasks: one item that fails."""

    def collect(self) -> Iterator[pytest.Item]:
        yield NeedsDjangoTasks.from_parent(self, name="needs-django-tasks")


class NeedsDjangoTasks(pytest.Item):
    def runtest(self) -> None:
        raise pytest.fail.Exception(
            f"{self.path.name} is Django's own Tasks tests: it needs Django 6.0 or newer "
            f"(django.tasks); deselect it with -m 'not django_tasks'",
            pytrace=False,
        )


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> Any:
    """Each vendored test class, once per database."""
    if not HAS_TASKS or not isinstance(obj, type) or not collector.path.is_relative_to(VENDOR):
        return None
    from _pytest.unittest import UnitTestCase

    from tests.django.upstream_tasks.adapt import DatabaseTestCase

    if not issubclass(obj, DatabaseTestCase):
        return None
    if obj is DatabaseTestCase:  # the base the modules import: no test of its own
        return []
    on_pg = UnitTestCase.from_parent(collector, name=name)
    on_pg.add_marker(pytest.mark.postgresql)
    sqlite = UnitTestCase.from_parent(collector, name=f"{name}OnSQLite")
    sqlite.obj = on_sqlite(obj)  # not an attribute of the module, where pytest would look
    sqlite.add_marker(pytest.mark.sqlite)
    return [on_pg, sqlite]


def on_sqlite(case: type[Any]) -> type[Any]:
    """The test class ``case`` with the backend's tables on SQLite."""
    from django.test import override_settings

    from tests.django.upstream_tasks.adapt import ON_SQLITE

    # With "default" too: Django sets up the other test databases after it (TEST DEPENDENCIES).
    variant = type(f"{case.__name__}OnSQLite", (case,), {"databases": {"default", "sqlite"}})
    variant.__module__ = case.__module__
    return override_settings(DATABASE_ROUTERS=[ON_SQLITE])(variant)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the tests of :data:`NOT_APPLICABLE` (on either database)."""
    left_out = [item for item in items if not_applicable(item)]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if item not in left_out]


def not_applicable(item: pytest.Item) -> bool:
    cls = getattr(item, "cls", None)
    if cls is None or not item.path.is_relative_to(VENDOR):
        return False
    case = f"{item.path.name}::{cls.__name__.removesuffix('OnSQLite')}"
    return case in NOT_APPLICABLE or f"{case}::{item.name}" in NOT_APPLICABLE
