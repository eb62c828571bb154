"""Pruning finished task results (dbqueue_django.task_results), on both databases."""

from __future__ import annotations

import datetime as dt

import pytest

from dbqueue.message import State
from dbqueue_django.models import TaskItem, TaskRun
from dbqueue_django.task_results import FinishedTasks, Pruned
from tests.django import task_rows

pytestmark = [pytest.mark.django, pytest.mark.django_db(databases=["default", "sqlite"])]

DAY = dt.timedelta(days=1)
WEEK = dt.timedelta(days=7)


def remaining(alias: str) -> set[int]:
    return set(TaskRun.objects.using(alias).values_list("pk", flat=True))


def test_finished_results_older_than_the_age_go(alias: str) -> None:
    old_ok = task_rows.result(alias, "SUCCESSFUL", 2 * WEEK).pk
    old_failed = task_rows.result(alias, "FAILED", 2 * WEEK).pk
    recent = task_rows.result(alias, "SUCCESSFUL", DAY).pk
    running = task_rows.result(alias, "RUNNING", 2 * WEEK).pk  # started long ago, not finished
    tasks = FinishedTasks.older_than(WEEK, using=alias)
    assert tasks.count() == Pruned(results=2, failed_tasks=0)
    assert tasks.delete() == Pruned(results=2, failed_tasks=0)
    assert remaining(alias) == {recent, running}
    assert old_ok not in remaining(alias) and old_failed not in remaining(alias)


def test_a_failed_task_goes_with_its_queue_item(alias: str) -> None:
    old = task_rows.failed_task(alias, 2 * WEEK)
    recent = task_rows.failed_task(alias, DAY)
    assert FinishedTasks.older_than(WEEK, using=alias).delete() == Pruned(1, 1)
    assert set(TaskItem.queue.using(alias).failed().values_list("pk", flat=True)) == {recent}
    assert remaining(alias) == {recent}
    assert old not in set(
        TaskItem.queue_meta_model.objects.using(alias).values_list("pk", flat=True)
    )


def test_a_task_retried_since_is_kept(alias: str) -> None:
    """Its old result says FAILED, but its item is ready again: it has not finished."""
    retried = task_rows.failed_task(alias, 2 * WEEK)
    assert TaskItem.queue.using(alias).retry([retried]) == 1
    assert FinishedTasks.older_than(WEEK, using=alias).delete() == Pruned(0, 0)
    assert remaining(alias) == {retried}
    item = TaskItem.queue.using(alias).items().get(pk=retried)
    assert item.state == State.READY  # type: ignore[attr-defined]


def test_one_backend_only(alias: str) -> None:
    task_rows.result(alias, "SUCCESSFUL", 2 * WEEK, backend="default")
    other = task_rows.result(alias, "SUCCESSFUL", 2 * WEEK, backend="other").pk
    task_rows.failed_task(alias, 2 * WEEK, backend="default")
    kept = task_rows.failed_task(alias, 2 * WEEK, backend="other")
    assert FinishedTasks.older_than(WEEK, using=alias, backend="default").delete() == Pruned(2, 1)
    assert remaining(alias) == {other, kept}


def test_many_are_deleted_in_batches(alias: str) -> None:
    for _ in range(7):
        task_rows.result(alias, "SUCCESSFUL", 2 * WEEK)
    keep = task_rows.result(alias, "SUCCESSFUL", DAY).pk
    assert FinishedTasks.older_than(WEEK, using=alias).delete(batch=3) == Pruned(7, 0)
    assert remaining(alias) == {keep}


@pytest.mark.both_databases
def test_the_other_database_is_left_alone(alias: str) -> None:
    other = "sqlite" if alias == "default" else "default"
    kept = task_rows.result(other, "SUCCESSFUL", 2 * WEEK).pk
    task_rows.result(alias, "SUCCESSFUL", 2 * WEEK)
    assert FinishedTasks.older_than(WEEK, using=alias).delete() == Pruned(1, 0)
    assert remaining(other) == {kept}
