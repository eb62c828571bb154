"""``Model.queue``'s async twins (``apush``, ``apop_batch``, ...) on PostgreSQL and SQLite.

Each twin runs its sync operation as Django's async ORM methods do, in the thread-sensitive
executor. The tests call async code the way an ASGI request's sync work is routed: through
``async_to_sync`` from the test's thread, whose connection the twins (and every function
wrapped by ``sync_to_async``) then use, as a request's sync calls share one thread. The same
view under a real uvicorn is tests/example/test_asgi.py.
"""

from __future__ import annotations

import datetime as dt
import inspect
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.contrib.auth.models import User
from django.core.exceptions import SynchronousOnlyOperation
from django.db import connections, transaction

from dbqueue.arguments import MAX_RUN_AT
from dbqueue.errors import InvalidArgument, TransactionStateError
from dbqueue.message import State
from dbqueue_django.queue import DjangoQueue
from dbqueue_django.ring_queue import RingDjangoQueue
from tests.django.testapp.models import Job, Tick

pytestmark = [
    pytest.mark.django,
    pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
]

#: The operations with an a-prefixed twin: those of the SQLAlchemy front's a-methods.
TWINS = [
    "push",
    "push_many",
    "pop_batch",
    "ack",
    "ack_pop",
    "fail",
    "extend",
    "release",
    "ack_by_id",
    "fail_by_id",
    "retry",
    "set_priority",
    "rescue",
    "next_due",
    "compact",
    "upkeep",
    "stats",
    "purge",
    "count",
    "delete",
]


def run[R](coroutine: Callable[[], Coroutine[Any, Any, R]]) -> R:
    """Await ``coroutine()`` on an event loop of its own, its sync calls in this thread."""
    return async_to_sync(coroutine)()


@pytest.fixture
def queue(alias: str) -> DjangoQueue[Job]:
    return Job.queue.using(alias)


@pytest.mark.parametrize("name", TWINS)
def test_every_operation_has_an_async_twin(name: str) -> None:
    twin = getattr(DjangoQueue, f"a{name}")
    assert inspect.iscoroutinefunction(twin)
    assert twin.__name__ == f"a{name}"
    assert f":meth:`{name}`" in twin.__doc__
    assert inspect.iscoroutinefunction(RingDjangoQueue.acheck)


def test_a_consumer_works_through_the_twins(queue: DjangoQueue[Job]) -> None:
    async def consume() -> None:
        a, b, c = await queue.apush_many([{"name": "a"}, {"name": "b"}, {"name": "c"}])
        first = await queue.apush(name="first", priority=5)
        assert await queue.acount("ready") == 4

        (job,) = await queue.apop_batch(1)  # model instances, as pop_batch's
        assert isinstance(job, Job) and (job.pk, job.name, job.attempts) == (first, "first", 1)
        assert await queue.aextend(job) == [first]
        acked, (job_a, job_b) = await queue.aack_pop(job, 2)
        assert acked == 1 and [job_a.pk, job_b.pk] == [a, b]
        assert await queue.afail(job_a, ValueError("boom"), retry=False) == {a: State.FAILED}
        assert await queue.arelease(job_b) == [b]

        assert await queue.aretry(a) == 1
        assert await queue.aset_priority([c], 9) == 1
        (job_c,) = await queue.apop_batch(1)
        assert job_c.pk == c
        assert await queue.aack_by_id([c]) == [c]
        assert (await queue.arescue()).ready == 0  # no lease has expired
        (job,) = await queue.apop_batch(1)  # a or b
        retried = await queue.afail_by_id([job.pk], "SMTP timeout")
        assert retried == {job.pk: State.READY}
        assert await queue.anext_due() is not None  # its back-off ends

        stats = await queue.astats()
        assert (stats["ready"], stats["scheduled"], stats["leased"]) == (1, 1, 0)
        assert await queue.adelete([job.pk]) == 1
        assert await queue.apurge("ready") == 1
        assert await queue.acount() == 0
        result = await queue.acompact()
        assert result.compacted or result.skipped

    run(consume)


def test_a_ring_works_through_the_twins(alias: str) -> None:
    ring: RingDjangoQueue[Tick] = Tick.queue.using(alias)

    async def consume() -> None:
        await ring.acheck()
        number = await ring.apush(symbol="ACME", price=1)
        (tick,) = await ring.apop_batch(1)
        assert isinstance(tick, Tick) and (tick.id, tick.symbol) == (number, "ACME")
        assert await ring.aack(tick) == [number]
        assert (await ring.astats())["occupancy"] == 0

    run(consume)


def test_the_twins_refuse_a_run_at_past_the_bound(
    queue: DjangoQueue[Job], outside: Callable[[str], int]
) -> None:
    """``run_at`` is bounded (MAX_RUN_AT) on the twins as on push and push_many."""
    far = MAX_RUN_AT + dt.timedelta(days=1)

    async def view() -> None:
        with pytest.raises(InvalidArgument, match=r"run_at must be at most 9000-01-01"):
            await queue.apush(name="far", run_at=far)
        with pytest.raises(InvalidArgument, match=r"run_at must be at most 9000-01-01"):
            await queue.apush_many([{"name": "far"}], run_at=far)
        await queue.apush(name="at the bound", run_at=MAX_RUN_AT)

    run(view)
    assert outside("testapp_job_meta") == 1  # only the push at the bound


def test_acreate_on_a_queue_model_pushes(alias: str, queue: DjangoQueue[Job]) -> None:
    async def view() -> Job:
        return await Job.objects.using(alias).acreate(name="from the ORM")

    job = run(view)
    assert [item.pk for item in queue.pop_batch(5)] == [job.pk]


# -- transactions ---------------------------------------------------------------------------


def test_apush_outside_a_transaction_commits_at_once(
    queue: DjangoQueue[Job], outside: Callable[[str], int]
) -> None:
    async def view() -> None:
        await queue.apush(name="welcome mail")
        # Seen by another connection before the view returns: autocommit, as Django's.
        assert await sync_to_async(outside)("testapp_job_meta") == 1

    run(view)


def test_a_sync_block_pushes_in_the_order_transaction(
    alias: str, queue: DjangoQueue[Job], outside: Callable[[str], int]
) -> None:
    """The documented pattern: no async atomic(), so a sync function run by sync_to_async
    writes the order and pushes its message in one transaction; a rollback leaves neither."""

    def place_order(username: str, *, fail: bool = False) -> int:
        with transaction.atomic(using=alias):
            User.objects.using(alias).create(username=username)
            message = queue.push(name=f"welcome {username}")
            if fail:
                raise RuntimeError("the payment failed")
            return message

    async def view(username: str, *, fail: bool = False) -> int:
        return await sync_to_async(place_order)(username, fail=fail)

    message = async_to_sync(view)("ada")
    tables = ("auth_user", "testapp_job", "testapp_job_meta")
    assert [outside(t) for t in tables] == [1, 1, 1]
    assert [job.pk for job in queue.items()] == [message]

    with pytest.raises(RuntimeError, match="payment"):
        async_to_sync(view)("grace", fail=True)
    assert [outside(t) for t in tables] == [1, 1, 1]
    assert list(User.objects.using(alias).values_list("username", flat=True)) == ["ada"]


def test_a_twin_joins_the_atomic_block_of_its_thread(
    alias: str, queue: DjangoQueue[Job], outside: Callable[[str], int]
) -> None:
    """A twin runs on the connection of the thread that awaits it through async_to_sync (a
    request's sync thread), so it joins the block open there and rolls back with it."""
    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        User.objects.using(alias).create(username="ada")
        async_to_sync(queue.apush)(name="welcome ada")
        assert queue.count() == 1  # this connection sees it; no other one does
        assert outside("testapp_job_meta") == 0
        raise RuntimeError
    assert (outside("auth_user"), outside("testapp_job"), outside("testapp_job_meta")) == (0, 0, 0)


def test_a_transactional_pop_needs_the_sync_block(queue: DjangoQueue[Job]) -> None:
    queue.push(name="x")

    async def pop() -> list[Job]:
        return await queue.apop_batch(1, mode="transactional")

    with pytest.raises(TransactionStateError):
        run(pop)
    assert queue.count("ready") == 1


# -- misuse ---------------------------------------------------------------------------------


def test_a_sync_operation_in_async_code_is_refused(queue: DjangoQueue[Job]) -> None:
    async def view() -> None:
        queue.push(name="lost")

    with pytest.raises(SynchronousOnlyOperation, match=r"Job\.queue .* await its a-method"):
        run(view)
    assert queue.count() == 0


def test_django_allow_async_unsafe_lets_a_sync_operation_run(
    alias: str, queue: DjangoQueue[Job], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Django's own switch

    async def script() -> None:
        try:
            queue.push(name="from a notebook")
        finally:
            connections[alias].close()  # the loop thread's own connection

    run(script)
    assert queue.count() == 1


def test_a_consumer_group_has_the_twins_too(alias: str) -> None:
    from tests.django.testapp.models import FanoutJob

    queue = FanoutJob.queue.using(alias)

    async def consume() -> None:
        item = await queue.apush(subject="a")
        email = queue.group("email")
        (job,) = await email.apop_batch(1)  # a model instance, as pop_batch's
        assert (job.id, job.subject) == (item, "a")
        assert await email.aack([job]) == [item]
        assert await email.acount() == 0
        assert await queue.group("search").acount("ready") == 1

    run(consume)
