"""Items for the admin pages' tests: failed ones (split, ring, task) with the error given,
made through each queue's own operations on the database the router picks; and the URLs of
their lists."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from dbqueue.message import State
from dbqueue_django.models import TaskItem, TaskRun
from tests.django.testapp.models import Ping, Tick

ERROR = "Traceback ...\nValueError: <b>bad</b>"

# Their lists in the admin, and the overview.
PINGS = "/admin/testapp/ping/"
TICKS = "/admin/testapp/tick/"
FAILED_TICKS = "/admin/testapp/tickfailed/"
TASKS = "/admin/dbqueue_django/taskitem/"
OVERVIEW = "/admin/dbqueue_django/queueoverview/"


def failed_ping(message: str, error: str = ERROR) -> int:
    """A Ping failed for good, with ``error`` as its last error. Pushed with a high priority,
    so its pops take it before any other ready item."""
    item_id = Ping.queue.push(message=message, priority=100)
    for _ in range(Ping.queue.spec.options.max_attempts):
        (item,) = Ping.queue.pop_batch(1)
        assert item.id == item_id
        if Ping.queue.fail(item, error, delay=dt.timedelta(0))[item_id] == State.FAILED:
            return item_id
    raise AssertionError("the item never failed for good")


def failed_tick(symbol: str, error: str = ERROR) -> int:
    """A tick that used its two attempts (push it before any other): its number in the failed
    table."""
    Tick.queue.push(symbol=symbol, price=Decimal(1))
    for _ in range(Tick.queue.spec.options.max_attempts):
        (item,) = Tick.queue.pop_batch(1)
        outcome = Tick.queue.fail(item, error, delay=dt.timedelta(0))
        Tick.queue.rescue()  # the sweeper pushes a failed attempt again at once
    assert outcome == {item.id: State.FAILED}
    return int(item.id)


def failed_task(queue_name: str, error: str, runs: int = 1) -> int:
    """A task failed in its queue item, with the run record the worker keeps (``runs`` runs,
    as after ``runs - 1`` retries from the admin). Made as the worker makes them, without
    running a task: Django 5.2 has no Tasks framework, and the admin needs none."""
    item_id = TaskItem.queue.push(
        task_path="tests.django.testapp.tasks.broken",
        backend="default",
        queue_name=queue_name,
        args=["why"],
        kwargs={},
    )
    (item,) = TaskItem.queue.pop_batch(1)
    assert TaskItem.queue.fail(item, error)[item_id] == State.FAILED
    TaskRun.objects.create(
        pk=item_id,
        task_path=item.task_path,
        backend=item.backend,
        queue_name=queue_name,
        status="FAILED",
        enqueued_at=item.enqueued_at,
        worker_ids=[f"worker-{n}" for n in range(runs)],
    )
    return item_id
