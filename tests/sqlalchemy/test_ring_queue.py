"""``Model.queue`` of a ring queue class (``Tick``, 8 slots) on a Session, on real PostgreSQL
and SQLite: what is SQLAlchemy's own (transient slot instances, ``items()``, the failed table
and ``waiting()``, a full ring, missing tables, the capacity check). What every front end does
alike with a ring (delivery modes, fencing, failures, bad input) is the conformance suite's
(tests/conformance, on ``RingJob``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

import dbqueue.front
from dbqueue.errors import (
    InvalidArgument,
    NotLeased,
    QueueFull,
    QueueTableMissing,
    RingCapacityMismatch,
    TransactionStateError,
)
from dbqueue.message import State
from dbqueue.ring import RingQueue, SlotState
from dbqueue_sa import RingQueueMixin
from tests.sqlalchemy.models import Tick

pytestmark = pytest.mark.sqlalchemy
ZERO = dt.timedelta(0)
CAPACITY = 8


@pytest.fixture(autouse=True)
def fresh_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test creates the ring again (its counters restart at 0), but the process keeps
    each ring's pending pop claims per database: start every test with none."""
    monkeypatch.setattr(dbqueue.front, "_CORES", {})


@pytest.fixture
def session(engine: sa.Engine) -> Iterator[Session]:
    with Session(engine) as session:
        yield session


def tick(i: int, **extra: Any) -> dict[str, Any]:
    return {"symbol": f"S{i}", "price": Decimal(i) / 4, **extra}


def push(session: Session, count: int) -> list[int]:
    numbers = Tick.queue.push_many(session, [tick(i) for i in range(count)])
    session.commit()
    return numbers


def item_ids(session: Session, state: Any = None) -> list[int]:
    return [t.id for t in session.scalars(Tick.queue.items(state))]


def fail_for_good(session: Session, symbol: str) -> int:
    """Push a tick and fail it max_attempts (2) times: it moves to the failed table."""
    number = Tick.queue.push(session, symbol=symbol, price=Decimal(1))
    (first,) = Tick.queue.pop_batch(session)
    assert Tick.queue.fail(session, first, "first attempt", delay=ZERO) == {number: State.READY}
    Tick.queue.rescue(session)  # the sweeper pushes the retry again, under a new number
    (second,) = Tick.queue.pop_batch(session)
    assert (second.symbol, second.attempts) == (symbol, 2)
    failed = Tick.queue.fail(session, second, ValueError("second attempt"))
    assert failed == {second.id: State.FAILED}
    session.commit()
    return second.id


# -- instances ------------------------------------------------------------------------------


def test_pop_batch_returns_transient_slot_instances(session: Session) -> None:
    numbers = Tick.queue.push_many(session, [tick(1, note="first"), tick(2)])
    session.commit()
    ticks = Tick.queue.pop_batch(session, 5)
    assert [type(t) for t in ticks] == [Tick, Tick]
    first = ticks[0]
    assert first.id == first.seq == numbers[0] and first.slot == numbers[0] % CAPACITY
    assert (first.symbol, first.price, first.volume, first.note) == (
        "S1",
        Decimal("0.25"),
        0,
        "first",
    )
    assert ticks[1].note is None
    assert (first.attempts, first.state, first.last_error) == (1, SlotState.LEASED, None)
    assert first.lease_until is not None and first.pushed_at is not None
    assert first.pushed_at.utcoffset() is not None
    # Transient: the slot moves on to other messages, so no session tracks the instance.
    assert sa.inspect(first).transient and first not in session
    session.commit()
    stored = session.get(Tick, first.slot)
    assert stored is not None and (stored.id, stored.state, stored.symbol) == (
        first.id,
        SlotState.LEASED,
        "S1",
    )


@pytest.mark.parametrize("mode", ["at_most_once", "transactional"])
def test_the_removing_modes_empty_the_slot(session: Session, mode: str) -> None:
    numbers = push(session, 3)
    ticks = Tick.queue.pop_batch(session, 2, mode=mode)
    session.commit()
    assert [t.id for t in ticks] == numbers[:2]
    assert all(t.state == SlotState.EMPTY and t.lease_until is None for t in ticks)
    assert item_ids(session) == numbers[2:]
    with pytest.raises(NotLeased):
        Tick.queue.ack(session, ticks)  # nothing to acknowledge: they are gone


def test_a_connection_instead_of_a_session(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        numbers = Tick.queue.push_many(conn, [tick(1), tick(2)])
    with engine.connect() as conn:
        ticks = Tick.queue.pop_batch(conn, 5, mode="at_most_once")
        assert [(type(t), t.id) for t in ticks] == [(Tick, n) for n in numbers]
        assert Tick.queue.stats(conn)["ready"] == 0


# -- acknowledging and failing ----------------------------------------------------------------


def test_a_failure_waits_for_its_back_off_out_of_the_ring(session: Session) -> None:
    (number,) = push(session, 1)
    (item,) = Tick.queue.pop_batch(session)
    Tick.queue.fail(session, item, ValueError("no price feed"), delay=dt.timedelta(hours=1))
    (row,) = session.execute(Tick.queue.waiting()).all()  # its slot is free meanwhile
    assert (row.id, row.state, row.last_error) == (number, State.READY, "ValueError: no price feed")
    assert row.run_at.utcoffset() is not None and item_ids(session) == []
    assert Tick.queue.pop_batch(session) == []
    assert Tick.queue.rescue(session).returned == 0  # its back-off has not ended
    assert Tick.queue.stats(session)["scheduled"] == 1
    assert session.execute(Tick.queue.failed()).all() == []


def test_failed_messages_move_to_the_failed_table(session: Session) -> None:
    number = fail_for_good(session, "BAD")
    (row,) = session.execute(Tick.queue.failed()).all()
    assert (row.id, row.symbol, row.price, row.attempts) == (number, "BAD", Decimal(1), 2)
    assert row.last_error == "ValueError: second attempt"
    assert row.failed_at.utcoffset() is not None
    assert Tick.queue.stats(session)["failed"] == 1 and item_ids(session) == []
    # Retry: pushed again at the tail under a new number, attempts reset.
    assert Tick.queue.retry(session, [row.id]) == 1
    (retried,) = Tick.queue.pop_batch(session)
    assert (retried.symbol, retried.attempts) == ("BAD", 1) and retried.id > number
    assert session.execute(Tick.queue.failed()).all() == []


def test_items_filter_by_slot_state(session: Session) -> None:
    numbers = push(session, 2)
    Tick.queue.pop_batch(session)
    assert item_ids(session, "ready") == numbers[1:]
    assert item_ids(session, "leased") == item_ids(session, State.LEASED) == numbers[:1]
    with pytest.raises(InvalidArgument, match=r"failed\(\)"):
        Tick.queue.items("failed")


def test_stats_show_capacity_and_occupancy(session: Session) -> None:
    push(session, 2)
    Tick.queue.pop_batch(session)
    stats = Tick.queue.stats(session)
    assert (stats["ready"], stats["leased"], stats["capacity"]) == (1, 1, CAPACITY)
    assert stats["occupancy"] == 2 / CAPACITY


def test_the_core_queue_is_cached_per_class_and_database(session: Session, url: str) -> None:
    core = Tick.queue.core(session)
    assert isinstance(core, RingQueue) and core.capacity == CAPACITY
    assert Tick.queue.core(session) is core
    other = sa.create_engine(url)
    try:
        with other.connect() as conn:
            assert Tick.queue.core(conn) is core  # the same database by another engine
    finally:
        other.dispose()


# -- bad input and a full ring ----------------------------------------------------------------


def test_a_full_ring_raises_queue_full_and_loses_nothing(session: Session) -> None:
    numbers = push(session, CAPACITY)
    with pytest.raises(QueueFull, match="is full") as full:
        Tick.queue.push(session, **tick(99))
    assert full.value.pushed == [None] and full.value.remaining == 1  # one entry per message
    with pytest.raises(QueueFull) as partly:
        Tick.queue.push_many(session, [tick(100), tick(101)])
    assert partly.value.pushed == [None, None]
    session.commit()  # the session is still usable
    # Nothing stored was lost, and once poppers free the slots pushes land again.
    assert item_ids(session) == numbers
    session.rollback()
    popped = Tick.queue.pop_batch(session, CAPACITY, mode="at_most_once")
    assert [t.symbol for t in popped] == [f"S{i}" for i in range(CAPACITY)]
    later = Tick.queue.push(session, **tick(102))
    session.commit()
    assert item_ids(session) == [later]


def test_a_ring_without_its_tables_raises_queue_table_missing(url: str) -> None:
    class Base(DeclarativeBase):
        pass

    class Unmade(RingQueueMixin, Base):
        __tablename__ = "ring_unmade"
        __queue_options__ = {"capacity": 4}
        symbol: Mapped[str] = mapped_column(sa.String(12))

    engine = sa.create_engine(url)
    try:
        with Session(engine) as session:
            with pytest.raises(QueueTableMissing, match="queue 'ring_unmade': its tables do not"):
                Unmade.queue.push(session, symbol="X")
            session.rollback()
            with pytest.raises(QueueTableMissing):
                Unmade.queue.check(session)
    finally:
        engine.dispose()


def test_check_reports_a_table_of_another_capacity(session: Session, engine: sa.Engine) -> None:
    Tick.queue.check(session)  # 8 slots, as declared

    class Base(DeclarativeBase):
        pass

    class Bigger(RingQueueMixin, Base):
        __tablename__ = "sa_tick"  # the same table, declared with another capacity
        __queue_options__ = {"capacity": 16}
        symbol: Mapped[str] = mapped_column(sa.String(12))
        price: Mapped[Decimal] = mapped_column(sa.Numeric(12, 4))
        volume: Mapped[int] = mapped_column(default=0)
        note: Mapped[str | None] = mapped_column(sa.Text())

    with pytest.raises(RingCapacityMismatch, match="declares capacity 16") as info:
        Bigger.queue.check(session)
    assert "Changing capacity needs a migration" in str(info.value)
    session.rollback()
    with engine.begin() as conn:
        conn.execute(sa.delete(Tick).where(Tick.slot >= CAPACITY // 2))
    with pytest.raises(RingCapacityMismatch, match="declares capacity 8"):
        Tick.queue.check(session)


def test_compact_commits_on_its_own_and_keeps_every_message(
    engine: sa.Engine, session: Session
) -> None:
    for _ in range(3):  # round the ring a few times
        push(session, CAPACITY)
        Tick.queue.ack(session, Tick.queue.pop_batch(session, CAPACITY))
        session.commit()
    numbers = push(session, 5)
    (leased,) = Tick.queue.pop_batch(session, 1)
    with pytest.raises(TransactionStateError, match="outside a transaction"):
        Tick.queue.compact(session)  # the pop's transaction is still open
    session.commit()
    result = Tick.queue.compact(session)
    assert result.compacted is (engine.dialect.name == "postgresql")
    assert not session.in_transaction()
    assert Tick.queue.ack(session, leased) == [numbers[0]]
    rest = Tick.queue.pop_batch(session, CAPACITY)
    assert [(t.id, t.symbol) for t in rest] == [(n, f"S{i}") for i, n in enumerate(numbers) if i]
    session.commit()


def test_a_ring_declared_to_spill_takes_every_push(session: Session) -> None:
    class Base(DeclarativeBase):
        pass

    class Spilling(RingQueueMixin, Base):
        __tablename__ = "sa_tick"  # Tick's table, declared with when_full="spill"
        __queue_options__ = {"capacity": CAPACITY, "when_full": "spill"}
        symbol: Mapped[str] = mapped_column(sa.String(12))
        price: Mapped[Decimal] = mapped_column(sa.Numeric(12, 4))
        volume: Mapped[int] = mapped_column(default=0)
        note: Mapped[str | None] = mapped_column(sa.Text())

    numbers = Spilling.queue.push_many(session, [tick(i) for i in range(CAPACITY + 1)])
    numbers.append(Spilling.queue.push(session, **tick(CAPACITY + 1)))
    session.commit()
    assert len(set(numbers)) == CAPACITY + 2
    stats = Spilling.queue.stats(session)
    assert (stats["ready"], stats["spilled"], stats["in_slots"]) == (CAPACITY + 2, 2, CAPACITY)
    session.commit()
    seen = []
    while popped := Spilling.queue.pop_batch(session, 4, mode="at_most_once"):
        seen.extend(t.symbol for t in popped)
        session.commit()
    assert seen == [f"S{i}" for i in range(CAPACITY + 2)]
    assert Spilling.queue.stats(session)["spilled"] == 0
