"""Consumer groups (fan-out) of a ring through the SQLAlchemy front: the declaration and its
tables (each group's state and side tables, its pop counter and rows made by create_all),
``Model.queue.group(name)`` on a Session (push through the queue, pop, ack, fail and retry per
group), a lagging group named in QueueFull, the queries per group, and what the queue itself
refuses."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from dbqueue.errors import InvalidArgument, InvalidSpec, QueueFull, UnsupportedOperation
from dbqueue.ring import SlotState
from dbqueue_sa import RingQueueMixin
from tests.sqlalchemy.conftest import async_url
from tests.sqlalchemy.ring_fanout_jobs import GROUPS, RingFanoutBase, Tick

pytestmark = pytest.mark.sqlalchemy


@pytest.fixture
def ring_engine(url: str) -> Iterator[sa.Engine]:
    """An engine with the grouped ring's tables created (dropped afterwards)."""
    engine = sa.create_engine(url)
    RingFanoutBase.metadata.drop_all(engine)
    RingFanoutBase.metadata.create_all(engine)
    yield engine
    RingFanoutBase.metadata.drop_all(engine)
    engine.dispose()


@pytest.fixture
def session(ring_engine: sa.Engine) -> Iterator[Session]:
    with Session(ring_engine) as session:
        yield session


# -- the declaration and its tables -----------------------------------------------------------


def test_each_group_has_a_state_table_and_a_side_table() -> None:
    spec = Tick.__queue_spec__
    assert spec.options.groups == GROUPS and spec.fans_out
    states, sides = Tick.__queue_group_tables__, Tick.__queue_group_failed__
    assert {g: t.name for g, t in states.items()} == {
        "trading": "sa_tick_ring_trading",
        "audit": "sa_tick_ring_audit",
    }
    assert {g: t.name for g, t in sides.items()} == {
        "trading": "sa_tick_side_trading",
        "audit": "sa_tick_side_audit",
    }
    assert list(states["audit"].c.keys()) == [
        "slot", "seq", "state", "attempts", "pushed_at", "lease_until", "last_error",
    ]  # fmt: skip
    assert {"price", "venue"} <= set(sides["audit"].c.keys())
    assert Tick.__queue_failed__.name == "sa_tick_failed"  # what spills before any group


def test_create_all_makes_every_groups_rows_and_drop_all_removes_them(
    ring_engine: sa.Engine,
) -> None:
    names = set(sa.inspect(ring_engine).get_table_names())
    assert {"sa_tick", "sa_tick_failed", "sa_tick_ring_trading", "sa_tick_side_audit"} <= names
    with ring_engine.connect() as conn:
        for group in GROUPS:
            table = Tick.__queue_group_tables__[group]
            rows = conn.execute(sa.select(table.c.slot, table.c.state)).all()
            assert sorted(rows) == [(s, int(SlotState.EMPTY)) for s in range(4)]
    RingFanoutBase.metadata.drop_all(ring_engine)
    left = set(sa.inspect(ring_engine).get_table_names())
    assert not {n for n in left if n.startswith("sa_tick")}
    if ring_engine.dialect.name == "sqlite":  # the counters are tables there
        assert "sa_tick_pop_audit" not in left


@pytest.mark.parametrize(
    ("taken", "what"),
    [("q_taken_ring_a", "consumer group 'a'"), ("q_taken_side_b", "consumer group 'b' side")],
    ids=["state", "side"],
)
def test_a_group_table_whose_name_is_taken_is_refused(taken: str, what: str) -> None:
    class Base(DeclarativeBase):
        pass

    sa.Table(taken, Base.metadata, sa.Column("id", sa.Integer, primary_key=True))
    with pytest.raises(InvalidSpec, match=f"{what} table is named {taken!r}"):

        class Taken(RingQueueMixin, Base):
            __tablename__ = "q_taken"
            __queue_options__ = {"capacity": 4, "groups": ("a", "b")}
            note: Mapped[str] = mapped_column(sa.Text())


# -- the queue and its groups -----------------------------------------------------------------


def test_each_group_gets_each_tick_once(session: Session) -> None:
    first = Tick.queue.push(session, price=100, venue="x")
    Tick.queue.push_many(session, [{"price": 101}, {"price": 102}])
    session.commit()
    for group in GROUPS:
        popped = Tick.queue.group(group).pop_batch(session, 10)
        session.commit()
        assert all(isinstance(t, Tick) for t in popped)
        assert [t.price for t in popped] == [100, 101, 102]
        assert popped[0].id == first and popped[0].venue == "x"
        assert Tick.queue.group(group).pop_batch(session, 10) == []
        assert Tick.queue.group(group).ack(session, popped) == [t.id for t in popped]
        session.commit()


def test_a_lagging_group_is_named_when_the_ring_is_full(session: Session) -> None:
    Tick.queue.push_many(session, [{"price": p} for p in range(4)])
    session.commit()
    trading = Tick.queue.group("trading")
    trading.ack(session, trading.pop_batch(session, 4))
    session.commit()
    with pytest.raises(QueueFull) as full:
        Tick.queue.push(session, price=4)
    session.rollback()
    assert full.value.lagging == "audit (4 behind)"
    audit = Tick.queue.group("audit")
    audit.ack(session, audit.pop_batch(session, 4))
    Tick.queue.push(session, price=4)
    session.commit()
    assert [t.price for t in trading.pop_batch(session, 5)] == [4]


def test_a_group_fails_and_retries_its_own_delivery(session: Session) -> None:
    Tick.queue.push(session, price=9)
    session.commit()
    audit = Tick.queue.group("audit")
    for _ in range(2):  # max_attempts
        (tick,) = audit.pop_batch(session, 1)
        audit.fail(session, [tick], "ledger down")
        session.commit()
    (row,) = session.execute(audit.failed()).all()
    assert row.price == 9 and row.attempts == 2 and row.last_error == "ledger down"
    assert Tick.queue.group("trading").stats(session)["failed"] == 0
    assert audit.retry(session, [row.id]) == 1
    session.commit()
    assert [t.price for t in audit.pop_batch(session, 1)] == [9]
    assert [t.price for t in Tick.queue.group("trading").pop_batch(session, 5)] == [9]


def test_the_items_query_reads_one_groups_state(session: Session) -> None:
    Tick.queue.push(session, price=1)
    session.commit()
    Tick.queue.group("trading").pop_batch(session, 1)
    session.commit()
    trading = session.execute(Tick.queue.group("trading").items()).all()
    audit = session.execute(Tick.queue.group("audit").items("ready")).all()
    assert [r.state for r in trading] == [int(SlotState.LEASED)]
    assert [(r[0].price, r.state) for r in audit] == [(1, int(SlotState.READY))]


def test_the_queue_itself_refuses_what_a_group_does(session: Session) -> None:
    with pytest.raises(UnsupportedOperation, match=r"queue\.group"):
        Tick.queue.pop_batch(session, 1)
    with pytest.raises(InvalidArgument, match=r"queue.group\('trading'\).items"):
        Tick.queue.items()
    with pytest.raises(InvalidArgument, match=r"queue.group\('trading'\).items"):
        Tick.queue.failed()
    with pytest.raises(UnsupportedOperation, match="does not push"):
        Tick.queue.group("audit").push(session, price=1)
    with pytest.raises(InvalidArgument, match="no consumer group 'risk'"):
        Tick.queue.group("risk")


def test_delete_removes_a_tick_from_every_group(session: Session) -> None:
    tick = Tick.queue.push(session, price=5)
    session.commit()
    assert Tick.queue.delete(session, [tick]) == 1
    session.commit()
    assert [Tick.queue.group(g).count(session) for g in GROUPS] == [0, 0]


def test_a_push_into_a_full_ring_spills_for_every_group(ring_engine: sa.Engine) -> None:
    class SpillBase(DeclarativeBase):
        pass

    class Spilling(RingQueueMixin, SpillBase):
        __tablename__ = "sa_spilling"
        __queue_options__ = {"capacity": 2, "groups": GROUPS, "when_full": "spill"}
        price: Mapped[int] = mapped_column(sa.Integer())

    SpillBase.metadata.create_all(ring_engine)
    try:
        with Session(ring_engine) as session:
            Spilling.queue.push_many(session, [{"price": p} for p in (1, 2, 3)])
            session.commit()
            # The ring's own side table keeps what spilled before any group got it.
            assert [r.price for r in session.execute(Spilling.queue.waiting()).all()] == [3]
            for group in GROUPS:
                taken = Spilling.queue.group(group).pop_batch(session, 5)
                Spilling.queue.group(group).ack(session, taken)
                session.commit()
            for group in GROUPS:  # once every group settled the slots, it goes to each
                assert [t.price for t in Spilling.queue.group(group).pop_batch(session, 5)] == [3]
                session.commit()
    finally:
        SpillBase.metadata.drop_all(ring_engine)


def test_session_delete_removes_the_tick_from_every_group(session: Session) -> None:
    Tick.queue.push(session, price=5)
    session.commit()
    (tick,) = session.scalars(sa.select(Tick).where(Tick.price == 5)).all()
    session.delete(tick)
    session.commit()
    assert [Tick.queue.group(g).count(session) for g in GROUPS] == [0, 0]


def test_a_bulk_delete_of_a_group_table_is_refused(session: Session) -> None:
    for table in (Tick.__queue_group_tables__["audit"], Tick.__queue_group_failed__["audit"]):
        with pytest.raises(InvalidArgument, match="bulk delete"):
            session.execute(sa.delete(table))


@pytest.mark.anyio
async def test_a_group_on_an_async_session(url: str) -> None:
    engine = create_async_engine(async_url(url))
    try:
        async with engine.begin() as conn:
            await conn.run_sync(RingFanoutBase.metadata.drop_all)
            await conn.run_sync(RingFanoutBase.metadata.create_all)
        async with AsyncSession(engine) as session:
            await Tick.queue.apush(session, price=4)
            await session.commit()
            trading = Tick.queue.group("trading")
            (tick,) = await trading.apop_batch(session, 1)
            assert tick.price == 4
            assert await trading.aack(session, [tick]) == [tick.id]
            await session.commit()
            assert await trading.acount(session) == 0
            assert await Tick.queue.group("audit").acount(session) == 1
        async with engine.begin() as conn:
            await conn.run_sync(RingFanoutBase.metadata.drop_all)
    finally:
        await engine.dispose()
