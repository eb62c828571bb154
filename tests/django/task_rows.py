"""Task results and failed tasks written straight into the Tasks backend's tables, at any age,
for the tests of pruning, retention and the admin (they need no django.tasks, so they run on
Django 5.2 too)."""

from __future__ import annotations

import datetime as dt

from django.utils import timezone

from dbqueue.message import State
from dbqueue_django.models import TaskItem, TaskRun

PATH = "tests.django.testapp.tasks.add"


def result(
    alias: str, status: str, age: dt.timedelta, *, backend: str = "default", pk: int | None = None
) -> TaskRun:
    """A task result that finished ``age`` ago (or, READY or RUNNING, has not finished)."""
    finished = timezone.now() - age
    done = status in ("SUCCESSFUL", "FAILED")
    return TaskRun.objects.using(alias).create(
        pk=pk if pk is not None else next_id(alias),
        task_path=PATH,
        backend=backend,
        queue_name="default",
        args=[1, 2],
        kwargs={},
        status=status,
        enqueued_at=finished - dt.timedelta(seconds=2),
        started_at=finished - dt.timedelta(seconds=1),
        finished_at=finished if done else None,
        last_attempted_at=finished - dt.timedelta(seconds=1),
        return_value=3 if status == "SUCCESSFUL" else None,
        errors=[{"exception_class_path": "builtins.ValueError", "traceback": "ValueError: x\n"}]
        if status == "FAILED"
        else [],
        worker_ids=["w1"],
    )


def next_id(alias: str) -> int:
    last = TaskRun.objects.using(alias).order_by("-pk").values_list("pk", flat=True).first()
    return max(last or 0, 10**9) + 1  # far above the ids pushes take


def failed_task(alias: str, age: dt.timedelta, *, backend: str = "default") -> int:
    """A task that failed ``age`` ago: its queue item, failed, and its FAILED result."""
    queue = TaskItem.queue.using(alias)
    item_id = queue.push(task_path=PATH, backend=backend, queue_name="default", args=[1, 2])
    (item,) = queue.pop_batch(1)
    assert queue.fail(item, "ValueError: x")[item_id] == State.FAILED
    TaskItem.queue_meta_model.objects.using(alias).filter(pk=item_id).update(
        run_at=timezone.now() - age
    )
    result(alias, "FAILED", age, backend=backend, pk=item_id)
    return item_id
