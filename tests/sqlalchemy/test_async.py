"""The ``a``-methods on an ``AsyncSession`` and an ``AsyncConnection``, through psycopg's
asyncio driver and aiosqlite: the same operations and transaction rules as the sync ones, and
a clear error when a sync method gets an async session or the other way round."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator
from decimal import Decimal

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_scoped_session,
    async_sessionmaker,
)
from sqlalchemy.orm import Session

import dbqueue.front
from dbqueue.errors import InvalidArgument, NotLeased, TransactionStateError
from dbqueue.message import RescueResult, State
from tests.sqlalchemy.models import Job, Tick

pytestmark = [pytest.mark.sqlalchemy, pytest.mark.anyio]
ZERO = dt.timedelta(0)


@pytest.fixture(autouse=True)
def fresh_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ring's tables are created again for every test: start without pending pop claims."""
    monkeypatch.setattr(dbqueue.front, "_CORES", {})


@pytest.fixture
async def session(async_engine: AsyncEngine) -> AsyncIterator[AsyncSession]:
    async with AsyncSession(async_engine) as session:
        yield session


def committed(engine: sa.Engine) -> dict[str, int]:
    """Items per state as another (sync) connection sees them (a plain read: a queue operation
    would wait for SQLite's write lock, which the async session may hold)."""
    meta = Job.__queue_meta__
    with engine.connect() as conn:
        rows = conn.execute(sa.select(meta.c.state, sa.func.count()).group_by(meta.c.state))
        counts = {State(state).name.lower(): n for state, n in rows}
    return {"ready": 0, "leased": 0, **counts}


async def test_push_and_pop_commit_with_the_session(
    session: AsyncSession, engine: sa.Engine
) -> None:
    first = await Job.queue.apush(session, name="a", priority=2)
    await Job.queue.apush_many(session, [{"name": "b"}, {"name": "c"}])
    assert committed(engine)["ready"] == 0
    await session.commit()
    assert committed(engine)["ready"] == 3
    jobs = await Job.queue.apop_batch(session, 2)
    assert [(type(j), j.name) for j in jobs] == [(Job, "a"), (Job, "b")]
    assert jobs[0].id == first and jobs[0].attempts == 1
    assert await Job.queue.aack(session, jobs) == sorted(j.id for j in jobs)
    await session.commit()
    assert committed(engine)["ready"] == 1


async def test_a_push_rolled_back_is_gone(session: AsyncSession, engine: sa.Engine) -> None:
    await Job.queue.apush(session, name="a")
    await session.rollback()
    assert committed(engine)["ready"] == 0


async def test_at_most_once(session: AsyncSession, engine: sa.Engine) -> None:
    await Job.queue.apush_many(session, [{"name": "a"}, {"name": "b"}])
    await session.commit()
    await Job.queue.astats(session)  # a transaction is open again
    with pytest.raises(TransactionStateError, match="the session has a transaction open"):
        await Job.queue.apop_batch(session, 1, mode="at_most_once")
    await session.rollback()
    (job,) = await Job.queue.apop_batch(session, 1, mode="at_most_once")
    assert job.name == "a" and not session.in_transaction()
    await session.rollback()  # too late: it committed on its own
    assert committed(engine)["ready"] == 1


async def test_transactional_pops_roll_back(session: AsyncSession, engine: sa.Engine) -> None:
    await Job.queue.apush(session, name="a")
    await session.commit()
    assert len(await Job.queue.apop_batch(session, 5, mode="transactional")) == 1
    await session.rollback()
    assert committed(engine)["ready"] == 1


async def test_the_other_operations(session: AsyncSession) -> None:
    a, b = await Job.queue.apush_many(session, [{"name": "a"}, {"name": "b"}])
    assert await Job.queue.aset_priority(session, [b], 5) == 1
    (job,) = await Job.queue.apop_batch(session)
    assert job.id == b
    assert await Job.queue.aextend(session, job, lease=dt.timedelta(minutes=5)) == [b]
    await Job.queue.afail(session, job, "once", delay=ZERO)
    for _ in range(2):
        (job,) = await Job.queue.apop_batch(session)
        assert job.id == b
        await Job.queue.afail(session, job, ValueError("again"), delay=ZERO)
    assert (await Job.queue.astats(session))["failed"] == 1
    (failed,) = (await session.execute(Job.queue.failed())).all()
    assert (failed[0].id, failed[0].last_error, failed.attempts) == (b, "ValueError: again", 3)
    assert await Job.queue.aretry(session, [b]) == 1
    (job,) = await Job.queue.apop_batch(session)
    expire = sa.update(Job.__queue_meta__).values(
        lease_until=dt.datetime.now(dt.UTC) - dt.timedelta(1)
    )
    await (await session.connection()).execute(expire)  # not the Session's: see dbqueue_sa.orm
    assert await Job.queue.arescue(session) == RescueResult(ready=1)
    acked, more = await Job.queue.aack_pop(session, [], 5)
    assert acked == 0 and sorted(j.id for j in more) == [a, b]
    with pytest.raises(NotLeased):
        await Job.queue.aack(session, job)  # rescued and delivered again
    assert await Job.queue.adelete(session, [a]) == 1
    assert await Job.queue.apurge(session, State.LEASED) == 1
    await session.commit()
    assert (await session.scalars(Job.queue.items())).all() == []


async def test_an_async_connection(async_engine: AsyncEngine, engine: sa.Engine) -> None:
    async with async_engine.begin() as conn:
        await Job.queue.apush_many(conn, [{"name": "a"}, {"name": "b"}])
        with pytest.raises(TransactionStateError):
            await Job.queue.apop_batch(conn, 1, mode="at_most_once")
    async with async_engine.connect() as conn:
        (job,) = await Job.queue.apop_batch(conn, 1, mode="at_most_once")
        assert job.name == "a" and not conn.in_transaction()
        assert len(await Job.queue.apop_batch(conn)) == 1
        await conn.commit()
    assert committed(engine) == {"ready": 0, "leased": 1}


async def test_a_ring_through_the_async_session(session: AsyncSession) -> None:
    numbers = await Tick.queue.apush_many(
        session, [{"symbol": "A", "price": Decimal(1)}, {"symbol": "B", "price": Decimal(2)}]
    )
    await session.commit()
    await Tick.queue.acheck(session)
    ticks = await Tick.queue.apop_batch(session, 5)
    assert [(type(t), t.id, t.symbol) for t in ticks] == [
        (Tick, numbers[0], "A"),
        (Tick, numbers[1], "B"),
    ]
    assert await Tick.queue.aack(session, ticks) == numbers
    await session.commit()
    assert (await Tick.queue.astats(session))["occupancy"] == 0.0


# -- the wrong kind of session ------------------------------------------------------------------


async def test_a_sync_method_refuses_an_async_session(session: AsyncSession) -> None:
    with pytest.raises(InvalidArgument, match=r"got AsyncSession .*use the a-methods, apush"):
        Job.queue.push(session, name="a")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="got AsyncSession"):
        Job.queue.pop_batch(session)  # type: ignore[arg-type]


async def test_a_sync_at_most_once_pop_refuses_an_async_session(session: AsyncSession) -> None:
    with pytest.raises(InvalidArgument, match="got AsyncSession"):
        Job.queue.pop_batch(session, mode="at_most_once")  # type: ignore[arg-type]


async def test_an_async_scoped_session_runs_on_its_current_session(
    async_engine: AsyncEngine,
) -> None:
    scoped = async_scoped_session(async_sessionmaker(async_engine), scopefunc=asyncio.current_task)
    try:
        pk = await Job.queue.apush(scoped, name="a")
        await scoped.commit()
        (got,) = await Job.queue.apop_batch(scoped, 1)
        assert (got.id, got.name) == (pk, "a")
        await scoped.commit()
    finally:
        await scoped.remove()


async def test_an_async_method_names_what_to_open_for_an_engine(
    async_engine: AsyncEngine,
) -> None:
    with pytest.raises(InvalidArgument, match=r"got AsyncEngine \(open one: async with"):
        await Job.queue.apush(async_engine, name="a")  # type: ignore[arg-type]


async def test_an_async_method_refuses_a_sync_session(engine: sa.Engine) -> None:
    with Session(engine) as session:
        with pytest.raises(InvalidArgument, match=r"apush needs an AsyncSession .*got Session"):
            await Job.queue.apush(session, name="a")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="use pop_batch for a Session"):
            await Job.queue.apop_batch(session)  # type: ignore[arg-type]
