"""The Django Tasks backend: enqueue in the caller's transaction, run by the worker, results,
errors, retries, deferral, priorities, context, async tasks and signals."""

from __future__ import annotations

import dataclasses
import datetime as dt
import sys
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("django.tasks", reason="Django Tasks exist from Django 6.0 on")

from django.db import transaction
from django.tasks import TaskResultStatus, default_task_backend, task, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.test import override_settings
from django.utils import timezone

from dbqueue.arguments import MAX_RUN_AT
from dbqueue.message import State
from dbqueue_django.handlers import autodiscover, handlers
from dbqueue_django.models import TaskItem, TaskRun
from dbqueue_django.tasks import DBQueueBackend
from dbqueue_django.worker import build_worker
from tests.django import task_rows
from tests.django.testapp import tasks

pytestmark = [pytest.mark.django, pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]


def work(max_messages: int | None = None) -> int:
    """Run the worker on the task queue (a burst, or until max_messages); return handled."""
    autodiscover()
    worker = build_worker(
        [handlers()[(TaskItem, None)]], burst=max_messages is None, max_messages=max_messages
    )
    return worker.run(handle_signals=False).handled


@pytest.fixture
def signals() -> Iterator[list[tuple[str, Any]]]:
    received: list[tuple[str, Any]] = []

    def on(name: str) -> Any:
        def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
            received.append((name, task_result.status))

        return receiver

    receivers = [(task_enqueued, on("enqueued")), (task_started, on("started")),
                 (task_finished, on("finished"))]  # fmt: skip
    for signal, receiver in receivers:
        signal.connect(receiver)
    yield received
    for signal, receiver in receivers:
        signal.disconnect(receiver)


def test_the_backend_is_configured() -> None:
    backend = task_backends["default"]
    assert isinstance(backend, DBQueueBackend)
    for feature in ("defer", "async_task", "get_result", "priority"):
        assert getattr(backend, f"supports_{feature}") is True


def test_a_task_runs_and_its_result_is_kept() -> None:
    result = tasks.add.enqueue(2, b=3)
    assert result.status == TaskResultStatus.READY
    assert (result.args, result.kwargs) == ([2], {"b": 3})
    assert tasks.add.get_result(result.id).status == TaskResultStatus.READY
    assert work() == 1
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.attempts == 1
    assert result.errors == []
    assert result.started_at is not None
    assert result.finished_at is not None
    assert result.enqueued_at is not None
    assert result.started_at <= result.finished_at
    assert not TaskItem.objects.exists()  # acked: the queue is empty, the run record stays


def test_the_enqueued_result_is_the_stored_one() -> None:
    result = tasks.add.enqueue(1, 2)
    assert tasks.add.get_result(result.id) == result
    before = dataclasses.asdict(result)
    result.refresh()
    assert dataclasses.asdict(result) == before


def test_run_after_comes_back_with_the_task() -> None:
    later = timezone.now() + dt.timedelta(hours=1)
    result = tasks.add.using(run_after=later).enqueue(1, 2)
    assert tasks.add.get_result(result.id).task.run_after == later
    assert tasks.add.get_result(result.id) == result
    due = tasks.add.using(run_after=timezone.now()).enqueue(3, 4)
    work()
    # Run and acked: the result comes from the run record now.
    finished = tasks.add.get_result(due.id)
    assert finished.status == TaskResultStatus.SUCCESSFUL
    assert finished.task == due.task
    assert tasks.add.get_result(result.id).task.run_after == later


def test_return_values_are_normalised_to_json() -> None:
    result = tasks.shout.enqueue("hi")
    work()
    result.refresh()
    assert result.return_value == {"text": "HI", "parts": [1, 2]}
    assert result.task.queue_name == "emails"
    assert result.task.priority == 10


def test_enqueue_joins_the_callers_transaction() -> None:
    with transaction.atomic():
        kept = tasks.add.enqueue(1, 1)
    try:
        with transaction.atomic():
            tasks.add.enqueue(9, 9)
            raise RuntimeError("the view failed")
    except RuntimeError:
        pass
    assert list(TaskItem.objects.values_list("pk", flat=True)) == [int(kept.id)]


def test_a_failing_task_is_failed_with_its_error_and_retried_from_the_queue() -> None:
    tasks.FAIL_NEXT[:] = [True]
    result = tasks.flaky.enqueue()
    assert work() == 0
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    (error,) = result.errors
    assert error.exception_class_path == "builtins.RuntimeError"
    assert error.exception_class is RuntimeError
    assert "first attempt fails" in error.traceback
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value
    item = TaskItem.queue.items().get(pk=int(result.id))
    assert item.state == State.FAILED  # type: ignore[attr-defined]
    # What the admin's Retry action does:
    assert TaskItem.queue.retry([item.pk]) == 1
    assert tasks.flaky.get_result(result.id).status == TaskResultStatus.READY
    assert work() == 1
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "done"
    assert result.attempts == 2
    assert len(result.errors) == 1  # the first attempt's error stays in the history


def test_the_error_names_the_exception_class() -> None:
    result = tasks.broken.enqueue("no")
    work()
    result.refresh()
    assert result.errors[0].exception_class_path == "builtins.ValueError"
    assert "ValueError: no" in result.errors[0].traceback


def test_a_deferred_task_waits() -> None:
    later = timezone.now() + dt.timedelta(hours=1)
    result = tasks.add.using(run_after=later).enqueue(1, 2)
    assert work() == 0
    assert tasks.add.get_result(result.id).status == TaskResultStatus.READY
    assert TaskItem.queue.items().get(pk=int(result.id)).run_at == later  # type: ignore[attr-defined]


def test_higher_priority_runs_first() -> None:
    low = tasks.add.using(priority=-5).enqueue(0, 0)
    high = tasks.add.using(priority=50).enqueue(1, 1)
    assert work(max_messages=1) == 1
    assert tasks.add.get_result(high.id).status == TaskResultStatus.SUCCESSFUL
    assert tasks.add.get_result(low.id).status == TaskResultStatus.READY


def test_a_task_can_take_its_context() -> None:
    result = tasks.with_context.enqueue("x")
    work()
    result.refresh()
    assert result.return_value == {"label": "x", "attempt": 1, "id": result.id}


def test_async_tasks_run() -> None:
    result = tasks.async_double.enqueue(21)
    work()
    result.refresh()
    assert result.return_value == 42


def test_an_unserialisable_return_value_fails_the_task() -> None:
    result = tasks.unserialisable_result.enqueue()
    work()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class_path == "builtins.TypeError"


def test_signals_fire_in_order(signals: list[tuple[str, Any]]) -> None:
    with transaction.atomic():
        tasks.add.enqueue(1, 2)
        assert signals == []  # enqueued fires once the transaction commits
    assert signals == [("enqueued", TaskResultStatus.READY)]
    work()
    assert signals[1:] == [
        ("started", TaskResultStatus.RUNNING),
        ("finished", TaskResultStatus.SUCCESSFUL),
    ]


def test_signals_of_a_failure(signals: list[tuple[str, Any]]) -> None:
    tasks.broken.enqueue("x")
    work()
    assert signals[-1] == ("finished", TaskResultStatus.FAILED)


def test_a_task_raising_keyboard_interrupt_fails_like_any_other(
    signals: list[tuple[str, Any]],
) -> None:
    """A worker thread's task raising KeyboardInterrupt is the task failing (Ctrl-C reaches
    the worker's main thread, never a task): recorded, finished, signalled."""
    result = tasks.interrupted.enqueue()
    assert work() == 0
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.finished_at is not None
    (error,) = result.errors
    assert error.exception_class is KeyboardInterrupt
    assert "the task's own code raised it" in error.traceback
    assert TaskRun.objects.get(pk=int(result.id)).status == TaskResultStatus.FAILED
    assert signals[-1] == ("finished", TaskResultStatus.FAILED)


# -- result retention -----------------------------------------------------------------------------


def backends(**retention: object) -> dict[str, Any]:
    """TASKS with a backend per keyword, each with that result_retention (None: no option)."""
    return {
        alias: {
            "BACKEND": "dbqueue_django.tasks.DBQueueBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {} if kept is None else {"result_retention": kept},
        }
        for alias, kept in retention.items()
    }


def test_the_worker_applies_each_backends_result_retention() -> None:
    week = dt.timedelta(days=7)
    with override_settings(TASKS=backends(default="7d", other=None)):
        old = task_rows.result("default", "SUCCESSFUL", 2 * week).pk
        old_failure = task_rows.failed_task("default", 2 * week)
        recent = task_rows.result("default", "SUCCESSFUL", dt.timedelta(days=1)).pk
        other = task_rows.result("default", "SUCCESSFUL", 2 * week, backend="other").pk
        assert work() == 0  # a burst with nothing to run prunes all the same
    assert set(TaskRun.objects.values_list("pk", flat=True)) == {recent, other}
    assert not TaskItem.objects.filter(pk=old_failure).exists()
    assert old not in set(TaskRun.objects.values_list("pk", flat=True))


def test_a_backend_that_cannot_be_loaded_does_not_stop_the_worker() -> None:
    """It is not dbqueue's, and Django's checks report it."""
    broken = {"missing": {"BACKEND": "does.not.exist"}}
    with override_settings(TASKS={**backends(default="7d"), **broken}):
        task_rows.result("default", "SUCCESSFUL", dt.timedelta(days=30))
        result = tasks.add.enqueue(1, 2)
        assert work() == 1
    assert list(TaskRun.objects.values_list("pk", flat=True)) == [int(result.id)]


def test_without_a_retention_results_are_kept() -> None:
    with override_settings(TASKS=backends(default=None)):
        kept = task_rows.result("default", "SUCCESSFUL", dt.timedelta(days=3650)).pk
        work()
    assert list(TaskRun.objects.values_list("pk", flat=True)) == [kept]


def test_a_retention_may_be_a_timedelta() -> None:
    with override_settings(TASKS=backends(default=dt.timedelta(hours=1))):
        assert task_backends["default"].result_retention == dt.timedelta(hours=1)  # type: ignore[attr-defined]
        task_rows.result("default", "FAILED", dt.timedelta(hours=2))
        work()
    assert not TaskRun.objects.exists()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("a month", "'a month' is not a duration"),
        (30, "30 is not a duration: write it as a string"),
        (dt.timedelta(0), "must be a positive duration"),
    ],
)
def test_a_bad_retention_is_reported_by_the_checks(value: object, message: str) -> None:
    with override_settings(TASKS=backends(default=value)):
        (error,) = task_backends["default"].check()
    assert error.id == "dbqueue.E003"
    assert error.msg.startswith("TASKS['default']['OPTIONS']['result_retention']")
    assert message in error.msg


# -- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize("result_id", ["999999999", "abc", ""])
def test_an_unknown_result_id(result_id: str) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(result_id)


def test_arguments_that_are_not_json_are_refused_and_nothing_is_queued() -> None:
    with pytest.raises(TypeError):
        tasks.add.enqueue({1, 2}, 3)
    assert not TaskItem.objects.exists()


def test_an_unknown_queue_name_is_refused() -> None:
    with pytest.raises(InvalidTask, match="Queue 'nope' is not valid"):
        tasks.add.using(queue_name="nope")


def test_an_out_of_range_priority_is_refused() -> None:
    with pytest.raises(InvalidTask, match="priority"):
        tasks.add.using(priority=101)


def test_a_run_after_past_the_latest_due_time_is_refused() -> None:
    """run_after becomes the queue item's run_at: bounded by MAX_RUN_AT, refused when the
    task is made, as Django refuses a naive one."""
    far = dt.datetime(9999, 12, 31, tzinfo=dt.UTC)
    expected = r"add: run_after must be at most 9000-01-01 00:00:00\+00:00, got .*\(9999, 12"
    with pytest.raises(InvalidTask, match=expected):
        tasks.add.using(run_after=far)
    result = tasks.add.using(run_after=MAX_RUN_AT).enqueue(1, 2)
    assert tasks.add.get_result(result.id).task.run_after == MAX_RUN_AT
    assert TaskItem.objects.count() == 1


def test_a_function_not_at_module_level_is_refused() -> None:
    def local(x: int) -> int:
        return x

    with pytest.raises(InvalidTask, match="module level"):
        task(local)


def test_a_task_whose_code_is_gone_fails_clearly() -> None:
    TaskItem.queue.push(task_path="tests.django.testapp.tasks.vanished", backend="default",
                        queue_name="default", args=[], kwargs={})  # fmt: skip
    assert work() == 0
    item = TaskItem.queue.failed().get()
    assert "cannot be imported" in (item.last_error or "")
    assert not TaskRun.objects.exists()


def test_a_stored_path_outside_the_project_is_never_imported() -> None:
    """A task path is data: one naming a module outside the installed apps and the project
    (``this`` prints the Zen of Python when imported) fails without importing it."""
    assert "this" not in sys.modules
    TaskItem.queue.push(task_path="this.s", backend="default", queue_name="default", args=[],
                        kwargs={})  # fmt: skip
    assert work() == 0
    item = TaskItem.queue.failed().get()
    assert "is not in an installed app" in (item.last_error or "")
    assert "this" not in sys.modules
