"""The ring queue's protocol on real PostgreSQL and SQLite: delivery modes, backpressure, holes,
strands, the sweeper, fencing, capacity edge cases and wrap-around, bad input."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from dbqueue import (
    InvalidArgument,
    InvalidPayload,
    InvalidSpec,
    NotLeased,
    PayloadTooLarge,
    QueueFull,
    QueueOptions,
    QueueSpec,
    QueueTableMissing,
    RingCapacityMismatch,
    RingQueue,
    State,
    TransactionStateError,
    get_dialect,
)
from dbqueue.executor import Executor
from dbqueue.message import Message
from dbqueue.ring import PushOutcome
from dbqueue.schema import RING_NEVER_ANALYZE
from tests.core.ringbed import BACKENDS, FIELDS, RingBed, ring_bed


@pytest.fixture(params=BACKENDS)
def bed(request: pytest.FixtureRequest, table_name: str) -> Iterator[RingBed]:
    with ring_bed(request.param, request, table_name) as b:
        yield b


@pytest.fixture
def pg_bed(request: pytest.FixtureRequest, table_name: str) -> Iterator[RingBed]:
    with ring_bed("postgresql", request, table_name) as b:
        yield b


def numbers(bed: RingBed, n: int, **kwargs: object) -> list[int]:
    return [m.payload["n"] for m in bed.queue.pop_batch(bed.ex, n, **kwargs)]  # type: ignore[arg-type]


def resized(bed: RingBed, capacity: int) -> RingQueue:
    """The bed's ring as a process declaring another capacity would see it."""
    spec = QueueSpec(bed.spec.table, FIELDS, QueueOptions(capacity=capacity))
    return RingQueue(spec, bed.queue.dialect)


def assert_laps(bed: RingBed) -> None:
    """Every slot holds a number congruent to its slot (it advanced by whole laps)."""
    cap = bed.queue.capacity
    assert all(seq % cap == slot for slot, seq, _ in bed.slots()), bed.slots()


# -- delivery -------------------------------------------------------------------------------


def test_push_pop_ack_in_push_order(bed: RingBed) -> None:
    ids = [bed.queue.push(bed.ex, {"n": i}) for i in range(3)]
    assert ids == [0, 1, 2]
    popped = bed.queue.pop_batch(bed.ex, 10)
    assert [(m.id, m.attempts, m.payload) for m in popped] == [
        (0, 1, {"n": 0, "note": None}),
        (1, 1, {"n": 1, "note": None}),
        (2, 1, {"n": 2, "note": None}),
    ]
    assert all(m.lease_until is not None and m.enqueued_at is not None for m in popped)
    assert bed.queue.stats(bed.ex).leased == 3
    assert bed.queue.ack(bed.ex, popped) == [0, 1, 2]
    stats = bed.queue.stats(bed.ex)
    assert (stats.ready, stats.leased, stats.capacity, stats.occupancy) == (0, 0, 4, 0.0)
    assert_laps(bed)


def test_push_many_returns_numbers_in_input_order(bed: RingBed) -> None:
    assert bed.queue.push_many(bed.ex, [{"n": i, "note": str(i)} for i in range(4)]) == [0, 1, 2, 3]
    assert numbers(bed, 4) == [0, 1, 2, 3]


def test_at_most_once_empties_the_slot_at_once(bed: RingBed) -> None:
    bed.queue.push_many(bed.ex, [{"n": 1}, {"n": 2}])
    assert numbers(bed, 5, mode="at_most_once") == [1, 2]
    assert bed.queue.stats(bed.ex).ready == 0
    assert [s for _, _, s in bed.slots()] == [0, 0, 0, 0]


def test_at_most_once_refuses_an_open_transaction(bed: RingBed) -> None:
    with pytest.raises(TransactionStateError), bed.transaction():
        bed.queue.pop_batch(bed.ex, 1, mode="at_most_once")


def test_transactional_pop_commits_with_the_caller(bed: RingBed) -> None:
    bed.queue.push(bed.ex, {"n": 7})
    with bed.transaction():
        assert numbers(bed, 1, mode="transactional") == [7]
    assert bed.queue.stats(bed.ex).ready == 0
    with pytest.raises(TransactionStateError):
        bed.queue.pop_batch(bed.ex, 1, mode="transactional")


def test_transactional_pop_rolled_back_is_delivered_again(bed: RingBed) -> None:
    bed.queue.push(bed.ex, {"n": 7})
    with pytest.raises(RuntimeError), bed.transaction():
        assert numbers(bed, 1, mode="transactional") == [7]
        raise RuntimeError("the caller's work failed")
    # PostgreSQL: the pop number is gone with the rollback, so the message is stranded until
    # the sweeper pushes it again. SQLite rolls the counter back too.
    bed.queue.rescue(bed.ex)
    assert numbers(bed, 1, mode="at_most_once") == [7]


def test_ack_pop_acks_and_leases_in_one_call(bed: RingBed) -> None:
    bed.queue.push_many(bed.ex, [{"n": i} for i in range(4)])
    first = bed.queue.pop_batch(bed.ex, 2)
    acked, nxt = bed.queue.ack_pop(bed.ex, first, 2)
    assert acked == 2
    assert [m.payload["n"] for m in nxt] == [2, 3]
    assert bed.queue.ack_pop(bed.ex, nxt, 2) == (2, [])


def test_ack_pop_acks_leases_a_pusher_moved_aside(bed: RingBed) -> None:
    bed.queue.push_many(bed.ex, [{"n": i} for i in range(4)])
    leased = bed.queue.pop_batch(bed.ex, 2)
    bed.queue.ack(bed.ex, bed.queue.pop_batch(bed.ex, 2))
    bed.queue.push_many(bed.ex, [{"n": 4}, {"n": 5}])  # their slots hold the two leases
    assert sorted(n for n, _ in bed.aside()) == sorted(m.id for m in leased)
    acked, nxt = bed.queue.ack_pop(bed.ex, leased, 2)
    assert (acked, [m.payload["n"] for m in nxt]) == (2, [4, 5])
    assert bed.aside() == []


def test_ack_pop_sends_the_acked_numbers_once_not_on_every_row(
    pg_bed: RingBed, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On every row, a batch of n sent n * n numbers: the worker's loop at 1,000 a batch ran
    # 6x slower than at 100 (8 MB a statement).
    ring = pg_bed.queue
    ring.push_many(pg_bed.ex, [{"n": i} for i in range(4)])
    first = ring.pop_batch(pg_bed.ex, 2)
    results: list[list[Any]] = []
    execute = pg_bed.ex.execute

    def recorded(sql: str, params: Any) -> Any:
        rows = execute(sql, params)
        results.append(rows)
        return rows

    monkeypatch.setattr(pg_bed.ex, "execute", recorded)
    acked, nxt = ring.ack_pop(pg_bed.ex, first, 2)
    assert (acked, [m.payload["n"] for m in nxt]) == (2, [2, 3])
    (rows,) = results
    assert [sorted(r[1]) for r in rows if r[1] is not None] == [[m.id for m in first]]


# -- leases, fencing, failures --------------------------------------------------------------


def test_expired_lease_is_swept_back_and_the_old_token_is_fenced(bed: RingBed) -> None:
    bed.queue.push(bed.ex, {"n": 1})
    (first,) = bed.queue.pop_batch(bed.ex, 1)
    bed.expire_leases()
    assert bed.queue.rescue(bed.ex).ready == 1
    (again,) = bed.queue.pop_batch(bed.ex, 1)
    assert (again.payload["n"], again.attempts) == (1, 2)
    assert again.last_error and "lease expired" in again.last_error
    with pytest.raises(NotLeased):
        bed.queue.ack(bed.ex, first)
    assert bed.queue.ack(bed.ex, first, strict=False) == []
    assert bed.queue.extend(bed.ex, [again]) == [again.id]
    assert bed.queue.ack(bed.ex, again) == [again.id]


def test_fail_waits_out_the_backoff_then_goes_to_the_failed_table(bed: RingBed) -> None:
    bed.queue.push(bed.ex, {"n": 1})
    for attempt in (1, 2):
        (m,) = bed.queue.pop_batch(bed.ex, 1)
        assert m.attempts == attempt
        assert bed.queue.fail(bed.ex, m, "boom", delay=dt.timedelta(hours=1)) == {m.id: State.READY}
        stats = bed.queue.stats(bed.ex)
        assert (stats.scheduled, stats.ready) == (1, 0)
        assert bed.queue.pop_batch(bed.ex, 1) == []  # still waiting out its back-off
        assert bed.aside() == [(m.id, State.READY)]  # out of the ring: its slot is free
        bed.expire_leases()
        assert bed.queue.rescue(bed.ex).returned == 1
    (m,) = bed.queue.pop_batch(bed.ex, 1)
    assert (m.attempts, m.last_error) == (3, "boom")
    assert bed.queue.fail(bed.ex, m, "final") == {m.id: State.FAILED}
    assert bed.failed_ids() == [m.id]
    assert bed.queue.stats(bed.ex).failed == 1
    assert bed.queue.retry(bed.ex, [m.id]) == 1
    (back,) = bed.queue.pop_batch(bed.ex, 1)
    assert (back.payload["n"], back.attempts, back.last_error) == (1, 1, "final")
    assert bed.failed_ids() == []


def test_a_retry_of_more_than_a_lap_returns_in_failure_order(
    request: pytest.FixtureRequest, table_name: str
) -> None:
    # Ten failed messages retried at once into a ring of four: two numbers a lap apart fall
    # on one slot, and the return used to place either, so an older message could wait aside
    # behind newer ones. One lap per statement keeps the order.
    with ring_bed("postgresql", request, table_name, max_attempts=1) as bed:
        q, ex = bed.queue, bed.ex
        for start in range(0, 10, 2):
            q.push_many(ex, [{"n": start}, {"n": start + 1}])
            q.fail(ex, q.pop_batch(ex, 2), "boom")
        assert q.retry(ex, range(100)) == 10
        taken: list[int] = []
        while len(taken) < 10:
            popped = q.pop_batch(ex, 4)
            assert popped, taken
            taken += [m.payload["n"] for m in popped]  # type: ignore[misc]
            q.ack(ex, popped)
        assert taken == list(range(10))


def test_a_pop_waits_out_a_sweeper_to_take_a_due_retry(pg_bed: RingBed) -> None:
    # A burst worker whose pop met its own maintenance thread at work found the ring empty
    # while the retry was due, and stopped: the pop now waits for the sweepers' lock.
    pg_bed.queue.push(pg_bed.ex, {"n": 1})
    (m,) = pg_bed.queue.pop_batch(pg_bed.ex, 1)
    assert pg_bed.queue.fail(pg_bed.ex, m, "boom", delay=dt.timedelta(0)) == {m.id: State.READY}
    sweeper = pg_bed.connect()
    sweeper.execute("SELECT pg_advisory_lock(%(k)s)", {"k": pg_bed.spec.lock_key})
    timer = threading.Timer(0.2, sweeper.execute, ("SELECT pg_advisory_unlock_all()", {}))
    timer.start()
    try:
        assert numbers(pg_bed, 1) == [1]
    finally:
        timer.join()


def test_a_pop_looks_again_when_a_sweeper_returned_the_retry_after_it_looked(
    bed: RingBed, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The sweeper's return committed between the pop's look at the ring and the pop's own
    # return: nothing was due any more and the lock was free, and a burst worker stopped with
    # the retry in the ring. The push sequence ahead of the pop sequence now sends it back.
    bed.queue.push(bed.ex, {"n": 1})
    (m,) = bed.queue.pop_batch(bed.ex, 1)
    assert bed.queue.fail(bed.ex, m, "boom", delay=dt.timedelta(0)) == {m.id: State.READY}
    sweeper, take_all = bed.connect(), bed.queue._take_all

    def then_the_sweeper(ex: Executor, *args: Any) -> tuple[int, list[Message]]:
        taken = take_all(ex, *args)
        if not taken[1]:
            assert bed.queue.return_due(sweeper) == 1
        return taken

    monkeypatch.setattr(bed.queue, "_take_all", then_the_sweeper)
    assert numbers(bed, 1) == [1]


def test_a_pop_gives_up_on_a_held_lock_and_returns_nothing_due(pg_bed: RingBed) -> None:
    pg_bed.queue.push(pg_bed.ex, {"n": 1})
    (m,) = pg_bed.queue.pop_batch(pg_bed.ex, 1)
    pg_bed.queue.fail(pg_bed.ex, m, "boom", delay=dt.timedelta(0))
    holder = pg_bed.connect()
    with holder.atomic():  # a caller's transaction that retried messages holds the lock
        holder.execute("SELECT pg_advisory_xact_lock(%(k)s)", {"k": pg_bed.spec.lock_key})
        assert pg_bed.queue.pop_batch(pg_bed.ex, 1) == []  # after RETURN_PATIENCE
    assert numbers(pg_bed, 1) == [1]


def test_last_attempt_expiring_goes_to_the_failed_table(bed: RingBed) -> None:
    bed.queue.push(bed.ex, {"n": 1})
    for _ in range(3):
        assert len(bed.queue.pop_batch(bed.ex, 1)) == 1
        bed.expire_leases()
        bed.queue.rescue(bed.ex)
    assert len(bed.failed_ids()) == 1
    assert bed.queue.stats(bed.ex).ready == 0


def test_fail_strict_changes_nothing_when_a_token_is_stale(bed: RingBed) -> None:
    bed.queue.push_many(bed.ex, [{"n": 1}, {"n": 2}])
    a, b = bed.queue.pop_batch(bed.ex, 2)
    with pytest.raises(NotLeased) as err:
        bed.queue.fail(bed.ex, [a, (b.id, b.attempts + 1)], "x")
    assert err.value.ids == [b.id]
    assert bed.queue.stats(bed.ex).leased == 2


def test_delete_and_purge(bed: RingBed) -> None:
    ids = bed.queue.push_many(bed.ex, [{"n": i} for i in range(4)])
    assert bed.queue.delete(bed.ex, ids[1]) == 1
    assert numbers(bed, 4) == [0, 2, 3]  # the deleted number is skipped
    assert bed.queue.purge(bed.ex, "leased") == 3
    bed.queue.push(bed.ex, {"n": 9})
    assert bed.queue.purge(bed.ex) == 1
    assert bed.queue.stats(bed.ex).ready == 0
    assert_laps(bed)


# -- backpressure and capacity --------------------------------------------------------------


def test_full_ring_raises_queue_full_and_keeps_what_it_holds(bed: RingBed) -> None:
    bed.queue.push_many(bed.ex, [{"n": i} for i in range(4)])
    with pytest.raises(QueueFull, match="is full") as err:
        bed.queue.push(bed.ex, {"n": 99})
    assert (err.value.pushed, err.value.remaining) == ([None], 1)
    assert numbers(bed, 10, mode="at_most_once") == [0, 1, 2, 3]


def test_push_many_beyond_the_free_slots_says_what_was_pushed(bed: RingBed) -> None:
    bed.queue.push_many(bed.ex, [{"n": 0}, {"n": 1}])
    with pytest.raises(QueueFull) as err:
        bed.queue.push_many(bed.ex, [{"n": i} for i in range(2, 6)], batch_size=1)
    assert err.value.pushed == [2, 3, None, None]
    assert err.value.remaining == 2


def test_a_waiting_push_lands_when_a_popper_frees_a_slot(bed: RingBed) -> None:
    slow = RingQueue(
        QueueSpec(bed.spec.table, FIELDS, QueueOptions(capacity=4, push_timeout=dt.timedelta(5))),
        bed.queue.dialect,
    )
    bed.queue.push_many(bed.ex, [{"n": i} for i in range(4)])
    popper = bed.connect()

    def pop_later() -> None:
        time.sleep(0.3)
        bed.queue.pop_batch(popper, 1, mode="at_most_once")

    thread = threading.Thread(target=pop_later)
    thread.start()
    assert slow.push(bed.ex, {"n": 4}) == 4
    thread.join()
    assert numbers(bed, 10, mode="at_most_once") == [1, 2, 3, 4]


def test_sqlite_cannot_wait_for_space_inside_a_transaction(request: pytest.FixtureRequest,
                                                           table_name: str) -> None:  # fmt: skip
    with ring_bed("sqlite", request, table_name, capacity=1) as bed:
        bed.queue.push(bed.ex, {"n": 1})
        full = pytest.raises(QueueFull, match="cannot wait inside a transaction")
        with full as raised, bed.transaction():
            bed.queue.push(bed.ex, {"n": 2})
        assert "push outside a transaction" in str(raised.value)
        assert "push_timeout" not in str(raised.value).split("holds the write lock")[1]
        assert numbers(bed, 5, mode="at_most_once") == [1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_capacity_one_goes_round_lap_after_lap(
    backend: str, request: pytest.FixtureRequest, table_name: str
) -> None:
    with ring_bed(backend, request, table_name, capacity=1) as bed:
        ids = []
        for i in range(5):
            ids.append(bed.queue.push(bed.ex, {"n": i}))
            with pytest.raises(QueueFull):
                bed.queue.push(bed.ex, {"n": -1})
            assert numbers(bed, 3, mode="at_most_once") == [i]
            # PostgreSQL: the refused push burned a number; the next pop marks it as a hole.
            assert bed.queue.pop_batch(bed.ex, 1) == []
        assert ids == sorted(set(ids))
        assert_laps(bed)


@pytest.mark.parametrize("backend", BACKENDS)
def test_capacity_two_alternates_slots(
    backend: str, request: pytest.FixtureRequest, table_name: str
) -> None:
    with ring_bed(backend, request, table_name, capacity=2) as bed:
        for lap in range(3):
            ids = bed.queue.push_many(bed.ex, [{"n": 2 * lap}, {"n": 2 * lap + 1}])
            assert [i % 2 for i in ids] == [0, 1]
            popped = bed.queue.pop_batch(bed.ex, 2)
            assert [m.payload["n"] for m in popped] == [2 * lap, 2 * lap + 1]
            bed.queue.ack(bed.ex, popped)
        assert [seq for _, seq, _ in bed.slots()] == [4, 5]


@pytest.mark.parametrize("backend", BACKENDS)
def test_numbers_wrap_past_two_to_the_31(
    backend: str, request: pytest.FixtureRequest, table_name: str
) -> None:
    start = 2**31 - 3
    with ring_bed(backend, request, table_name, start=start) as bed:
        for lap in range(3):
            ids = bed.queue.push_many(bed.ex, [{"n": lap * 4 + i} for i in range(4)])
            assert ids == list(range(start + lap * 4, start + lap * 4 + 4))
            popped = bed.queue.pop_batch(bed.ex, 4)
            assert [m.id for m in popped] == ids
            bed.queue.ack(bed.ex, popped)
        assert max(seq for _, seq, _ in bed.slots()) > 2**31
        assert_laps(bed)


def test_a_capacity_the_table_does_not_have_is_a_clear_error(bed: RingBed) -> None:
    bigger = resized(bed, 8)
    with pytest.raises(RingCapacityMismatch, match="declares capacity 8"):
        bigger.check(bed.ex)
    with pytest.raises(RingCapacityMismatch, match="declares capacity 8"):
        bigger.push(bed.ex, {"n": 1})
    smaller = resized(bed, 2)
    with pytest.raises(RingCapacityMismatch, match="it has 4 slots"):
        smaller.check(bed.ex)


# -- storage (PostgreSQL) ----------------------------------------------------------------------


def test_the_ring_is_analyzed_when_created_and_never_by_autovacuum(pg_bed: RingBed) -> None:
    # Its statistics stay good (the row count never changes); an ANALYZE's snapshot would keep
    # old slot versions from being pruned (see dbqueue.schema.RING_NEVER_ANALYZE).
    (stats,) = pg_bed.raw(
        "SELECT s.n_distinct FROM pg_stats s WHERE s.tablename = "
        f"'{pg_bed.spec.table}' AND s.attname = 'slot'"
    )
    assert float(stats[0]) == -1.0  # every slot distinct: taken from the inserted rows
    (options,) = pg_bed.raw(
        f"SELECT reloptions FROM pg_class WHERE oid = '\"{pg_bed.spec.table}\"'::regclass"
    )
    assert {"autovacuum_analyze_scale_factor=0",
            f"autovacuum_analyze_threshold={RING_NEVER_ANALYZE}"} <= set(options[0])  # fmt: skip


# -- holes and strands (PostgreSQL: numbers are not transactional) ---------------------------


def test_a_dead_pushers_number_becomes_a_hole(pg_bed: RingBed) -> None:
    lost = pg_bed.dead_pusher()
    pg_bed.queue.push(pg_bed.ex, {"n": 1})
    assert numbers(pg_bed, 2) == [1]  # claim 0 waits; with hole_timeout 0 it is marked at once
    assert pg_bed.slots()[lost % 4][1] == lost
    assert pg_bed.queue.pending_claims == 0
    # The late pusher finds its number given up on and takes a new one.
    assert pg_bed.queue._blocked(pg_bed.ex, lost, [5, None], evict=True) is PushOutcome.RENEW


def test_a_claim_waits_for_a_push_still_in_flight(pg_bed: RingBed) -> None:
    slow_spec = QueueSpec(pg_bed.spec.table, FIELDS, QueueOptions(capacity=4))
    patient = RingQueue(slow_spec, pg_bed.queue.dialect)  # hole_timeout: 2 s
    pusher = pg_bed.connect()
    with pusher.atomic():
        pg_bed.queue.push(pusher, {"n": 1})  # uncommitted: the popper cannot see it
        assert patient.pop_batch(pg_bed.ex, 1) == []
        assert patient.pending_claims == 1
    assert [m.payload["n"] for m in patient.pop_batch(pg_bed.ex, 1)] == [1]
    assert patient.pending_claims == 0


def test_a_long_push_transaction_is_not_marked_as_a_hole(pg_bed: RingBed) -> None:
    pusher = pg_bed.connect()
    with pusher.atomic():
        pg_bed.queue.push(pusher, {"n": 1})
        assert pg_bed.queue.pop_batch(pg_bed.ex, 1) == []  # hole_timeout 0, but the slot is locked
        assert pg_bed.queue.rescue(pg_bed.ex).holes == 0
    assert numbers(pg_bed, 1) == [1]


def test_a_drained_ring_takes_pushes_again_after_refused_ones_burned_laps(
    pg_bed: RingBed,
) -> None:
    """Pushes refused on a full ring each burned a number, laps of them; once the ring is
    drained its slots lag those laps behind the push sequence. A push waits hole_timeout (0
    here) for the burned numbers' pushers, then writes over the gap: no QueueFull on an
    empty ring, and no further numbers burned."""
    q, ex = pg_bed.queue, pg_bed.ex
    q.push_many(ex, [{"n": i} for i in range(4)])
    for i in range(10):
        with pytest.raises(QueueFull):
            q.push(ex, {"n": 100 + i})
    assert numbers(pg_bed, 4, mode="at_most_once") == [0, 1, 2, 3]
    assert q.push_many(ex, [{"n": i} for i in range(4, 8)]) == [14, 15, 16, 17]
    assert numbers(pg_bed, 10, mode="at_most_once") == [4, 5, 6, 7]
    assert_laps(pg_bed)


def test_a_push_never_waits_for_a_slot_a_push_in_flight_holds(pg_bed: RingBed) -> None:
    """A slot locked by a push in a long transaction is never waited for (lock_timeout would
    turn a wait into an error): the push takes a new number, whose slot lags behind the burned
    numbers, and writes over the gap."""
    q = pg_bed.queue
    slow = pg_bed.connect()
    with slow.atomic():
        q.push(slow, {"n": 0})  # number 0 in slot 0, uncommitted
        for _ in range(7):
            pg_bed.dead_pusher()  # numbers 1..7 burned
        other = pg_bed.connect()
        other.execute("SET lock_timeout = '2s'", {})
        assert q.push(other, {"n": 8}) == 9  # 8's slot is locked by number 0: number 9
    assert numbers(pg_bed, 10, mode="at_most_once") == [0, 8]
    assert_laps(pg_bed)


def test_a_dead_poppers_message_is_stranded_then_pushed_again(pg_bed: RingBed) -> None:
    pg_bed.queue.push_many(pg_bed.ex, [{"n": 0}, {"n": 1}])
    pg_bed.dead_popper()  # claimed number 0 and died
    assert numbers(pg_bed, 5) == [1]
    result = pg_bed.queue.rescue(pg_bed.ex)
    assert result.ready == 1
    (m,) = pg_bed.queue.pop_batch(pg_bed.ex, 5)
    assert (m.payload["n"], m.id) == (0, 2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_ring_full_of_expired_leases_is_swept_in_place(
    backend: str, request: pytest.FixtureRequest, table_name: str
) -> None:
    with ring_bed(backend, request, table_name) as bed:
        bed.queue.push_many(bed.ex, [{"n": i} for i in range(4)])
        assert len(bed.queue.pop_batch(bed.ex, 4)) == 4
        bed.expire_leases()
        assert bed.queue.rescue(bed.ex).ready == 4  # no free slot: renumbered where they are
        assert [m.id for m in bed.queue.pop_batch(bed.ex, 4)] == [4, 5, 6, 7]
        assert_laps(bed)


def test_a_ring_full_of_stranded_messages_is_swept_in_place(pg_bed: RingBed) -> None:
    for _ in range(4):
        pg_bed.dead_popper()
    pg_bed.queue.push_many(pg_bed.ex, [{"n": i} for i in range(4)])
    assert pg_bed.queue.pop_batch(pg_bed.ex, 4) == []
    assert pg_bed.queue.rescue(pg_bed.ex).ready == 4
    assert numbers(pg_bed, 4) == [0, 1, 2, 3]


def test_a_hole_whose_popper_died_too_is_swept(pg_bed: RingBed) -> None:
    pg_bed.dead_pusher()
    pg_bed.dead_popper()  # both number 0's pusher and popper are gone
    pg_bed.queue.push_many(pg_bed.ex, [{"n": i} for i in range(1, 4)])
    pg_bed.raw(f"UPDATE \"{pg_bed.spec.table}\" SET pushed_at = pushed_at - interval '1 s'")
    assert pg_bed.queue.rescue(pg_bed.ex).holes == 1
    assert numbers(pg_bed, 5, mode="at_most_once") == [1, 2, 3]
    # Slot 0 is usable again: the next lap lands there.
    assert pg_bed.queue.push_many(pg_bed.ex, [{"n": i} for i in range(4)]) == [4, 5, 6, 7]
    assert_laps(pg_bed)


def test_idle_poppers_do_not_run_ahead_of_pushers(pg_bed: RingBed) -> None:
    for _ in range(5):
        assert pg_bed.queue.pop_batch(pg_bed.ex, 100) == []
    assert pg_bed.queue.pending_claims == 0
    pg_bed.queue.push(pg_bed.ex, {"n": 1})
    assert numbers(pg_bed, 100) == [1]


def test_two_poppers_share_the_messages(pg_bed: RingBed) -> None:
    other = pg_bed.peer()
    pg_bed.queue.push_many(pg_bed.ex, [{"n": i} for i in range(4)])
    a = numbers(pg_bed, 2)
    b = [m.payload["n"] for m in other.pop_batch(pg_bed.connect(), 2)]
    assert sorted(a + b) == [0, 1, 2, 3]


# -- bad input ------------------------------------------------------------------------------


def test_bad_input_is_refused_and_nothing_is_stored(bed: RingBed) -> None:
    with pytest.raises(InvalidArgument, match="no priorities"):
        bed.queue.push(bed.ex, {"n": 1}, priority=5)
    with pytest.raises(InvalidArgument, match="cannot delay"):
        bed.queue.push(bed.ex, {"n": 1}, delay=dt.timedelta(seconds=1))
    with pytest.raises(InvalidArgument, match="cannot delay"):
        bed.queue.push_many(bed.ex, [{"n": 1}], run_at=dt.datetime.now(dt.UTC))
    with pytest.raises(InvalidPayload):
        bed.queue.push(bed.ex, {"n": "one"})
    with pytest.raises(InvalidPayload):
        bed.queue.push_many(bed.ex, [{"n": 1}, {"x": 2}])
    with pytest.raises(PayloadTooLarge):
        bed.queue.push(bed.ex, {"n": 1, "note": "x" * 300_000})
    with pytest.raises(InvalidArgument, match="no priorities"):
        bed.queue.set_priority(bed.ex, [0], 1)
    with pytest.raises(InvalidArgument):
        bed.queue.pop_batch(bed.ex, 0)
    assert bed.queue.stats(bed.ex).ready == 0
    assert [seq for _, seq, _ in bed.slots()] == [-4, -3, -2, -1]


def test_a_ring_needs_a_valid_capacity() -> None:
    with pytest.raises(InvalidSpec, match="needs QueueOptions"):
        RingQueue(QueueSpec("r", FIELDS), get_dialect("postgresql"))
    for capacity in (0, -1, True, 1.5, 1 << 30):
        with pytest.raises(InvalidSpec, match="capacity"):
            QueueOptions(capacity=capacity)  # type: ignore[arg-type]
    with pytest.raises(InvalidSpec, match="hole_timeout"):
        QueueOptions(capacity=4, hole_timeout=dt.timedelta(seconds=-1))


def test_a_missing_ring_table_is_a_clear_error(bed: RingBed) -> None:
    ghost = RingQueue(QueueSpec("ghost_ring", FIELDS, QueueOptions(capacity=4)), bed.queue.dialect)
    with pytest.raises(QueueTableMissing, match="ghost_ring"):
        ghost.push(bed.ex, {"n": 1})
    with pytest.raises(QueueTableMissing):
        ghost.pop_batch(bed.ex, 1)


def test_a_ring_table_without_its_counters_says_how_to_make_them(bed: RingBed) -> None:
    """The table exists (a migration made it without the ring operation): the error names the
    counter, and the operation that makes it."""
    kind = "SEQUENCE" if bed.backend == "postgresql" else "TABLE"
    bed.raw(f'DROP {kind} "{bed.spec.push_seq}"')
    with pytest.raises(QueueTableMissing, match=r"its counter '.*_push_seq' does not") as e:
        bed.queue.push(bed.ex, {"n": 1})
    assert f"op.create_queue_ring({bed.spec.table!r}, {bed.queue.capacity})" in str(e.value)
