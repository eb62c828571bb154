"""A ring's behaviour when full (``QueueOptions.when_full``), on PostgreSQL and SQLite: spill
(the overflow in the side table, delivered after the ring's messages, nothing refused), raise
(QueueFull at once) and wait (backpressure up to push_timeout)."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator

import pytest

from dbqueue import QueueFull, RingNotEmpty, RingQueue
from dbqueue.ring.states import SideState
from tests.core.ringbed import BACKENDS, RingBed, ring_bed

#: ring_bed's FAST options wait 100 ms; a mode that never waits declares no push_timeout.
NO_WAIT = {"push_timeout": dt.timedelta(seconds=5)}


@pytest.fixture(params=BACKENDS)
def spill(request: pytest.FixtureRequest, table_name: str) -> Iterator[RingBed]:
    with ring_bed(request.param, request, table_name, when_full="spill", **NO_WAIT) as bed:
        yield bed


@pytest.fixture(params=BACKENDS)
def raising(request: pytest.FixtureRequest, table_name: str) -> Iterator[RingBed]:
    with ring_bed(request.param, request, table_name, when_full="raise", **NO_WAIT) as bed:
        yield bed


def drain(bed: RingBed) -> list[int]:
    """Every message's ``n``, in the order they are delivered (popped, then acked), the
    sweeper run as a worker's maintenance would when a pop finds nothing."""
    seen: list[int] = []
    while True:
        popped = bed.queue.pop_batch(bed.ex, 3)
        if not popped:
            swept = bed.queue.rescue(bed.ex)
            if not (swept.ready or swept.returned or swept.holes):
                return seen
        seen.extend(m.payload["n"] for m in popped)
        bed.queue.ack(bed.ex, popped)


def spilled(bed: RingBed) -> list[int]:
    """The numbers (ids) of the side table's spilled messages."""
    return [n for n, state in bed.aside() if state == SideState.SPILLED]


def test_a_full_ring_spills_and_delivers_everything_once_in_push_order(spill: RingBed) -> None:
    ids = spill.queue.push_many(spill.ex, [{"n": i} for i in range(4)])
    more = [
        spill.queue.push(spill.ex, {"n": 4}),
        *spill.queue.push_many(spill.ex, [{"n": 5}, {"n": 6}]),
    ]
    assert len(set(ids + more)) == 7
    assert spilled(spill) == sorted(more)
    if spill.backend == "postgresql":
        assert more == sorted(more) and min(more) > max(ids)  # spilled under their numbers
    stats = spill.queue.stats(spill.ex)
    assert (stats.ready, stats.spilled, stats.in_slots) == (7, 3, 4)
    assert stats.report()["spilled"] == 3
    assert drain(spill) == list(range(7))
    assert spilled(spill) == []
    assert spill.queue.stats(spill.ex).ready == 0


def test_a_batch_larger_than_the_ring_spills_the_rest(spill: RingBed) -> None:
    ids = spill.queue.push_many(spill.ex, [{"n": i} for i in range(10)])
    assert len(set(ids)) == 10
    assert len(spilled(spill)) == 6
    assert drain(spill) == list(range(10))


def test_a_spilled_message_comes_after_every_push_committed_before_it(spill: RingBed) -> None:
    """The guarantee: a spilled message is delivered after every message whose push committed
    before its push began. A push that begins later may land in a slot a pop freed meanwhile,
    and overtake it: the ring's fast path does not look at the overflow."""
    spill.queue.push_many(spill.ex, [{"n": i} for i in range(4)])
    spill.queue.push_many(spill.ex, [{"n": 4}, {"n": 5}])  # spilled
    first = [m.payload["n"] for m in spill.queue.pop_batch(spill.ex, 2, mode="at_most_once")]
    spill.queue.push_many(spill.ex, [{"n": 6}, {"n": 7}])  # into the freed slots
    order = first + drain(spill)
    assert sorted(order) == list(range(8))
    assert order.index(4) > max(order.index(i) for i in range(4))
    assert order.index(5) > order.index(4)


def test_spilled_messages_go_back_in_the_order_they_spilled(spill: RingBed) -> None:
    spill.queue.push_many(spill.ex, [{"n": i} for i in range(4)])
    spill.queue.push_many(spill.ex, [{"n": i} for i in range(4, 9)])  # 5 spilled, 4 slots
    assert [m.payload["n"] for m in spill.queue.pop_batch(spill.ex, 4, mode="at_most_once")] == [
        0, 1, 2, 3,
    ]  # fmt: skip
    # The sweeper pushes what fits; the one that stays aside is the last one.
    assert spill.queue.rescue(spill.ex).returned == 4
    assert len(spilled(spill)) == 1
    assert drain(spill) == [4, 5, 6, 7, 8]


def test_a_spill_in_a_transaction_rolled_back_leaves_nothing(spill: RingBed) -> None:
    spill.queue.push_many(spill.ex, [{"n": i} for i in range(4)])

    class Undo(Exception):
        pass

    with pytest.raises(Undo), spill.transaction():
        spill.queue.push(spill.ex, {"n": 98})
        raise Undo
    with spill.transaction():
        spill.queue.push(spill.ex, {"n": 4})
    assert drain(spill) == [0, 1, 2, 3, 4]


def test_purge_ready_and_count_take_spilled_messages(spill: RingBed) -> None:
    spill.queue.push_many(spill.ex, [{"n": i} for i in range(6)])
    assert spill.queue.count(spill.ex, "ready") == 6
    assert spill.queue.purge(spill.ex, "failed") == 0
    assert spill.queue.purge(spill.ex, "ready") == 6
    assert spilled(spill) == []


def test_a_capacity_change_is_refused_while_messages_are_spilled(spill: RingBed) -> None:
    spill.queue.push_many(spill.ex, [{"n": i} for i in range(5)])
    spill.queue.pop_batch(spill.ex, 4, mode="at_most_once")
    with pytest.raises(RingNotEmpty, match=r"1 ready \(1 of them spilled, in its overflow\)"):
        spill.queue.check_empty(spill.ex, worker="dbqueue work", then="migrate again")
    assert drain(spill) == [4]
    spill.queue.check_empty(spill.ex, worker="dbqueue work", then="migrate again")


def test_raise_refuses_at_once_and_keeps_the_transaction(
    raising: RingBed, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_wait(*args: object) -> None:
        raise AssertionError("when_full='raise' must not wait")

    monkeypatch.setattr(RingQueue, "_sleep", no_wait)
    raising.queue.push_many(raising.ex, [{"n": i} for i in range(3)])
    with raising.transaction():
        raising.queue.push(raising.ex, {"n": 3})
        with pytest.raises(QueueFull, match=r"when_full='raise'.*when_full='spill'") as full:
            raising.queue.push(raising.ex, {"n": 99})
        assert full.value.pushed == [None]
        raising.queue.delete(raising.ex, [])  # the connection still runs statements
    with pytest.raises(QueueFull) as partly:
        raising.queue.push_many(raising.ex, [{"n": 98}])
    assert partly.value.remaining == 1
    assert raising.aside() == []
    assert drain(raising) == [0, 1, 2, 3]


@pytest.mark.parametrize("backend", BACKENDS)
def test_wait_raises_after_push_timeout(
    backend: str, request: pytest.FixtureRequest, table_name: str
) -> None:
    with ring_bed(backend, request, table_name, when_full="wait") as bed:
        bed.queue.push_many(bed.ex, [{"n": i} for i in range(4)])
        with pytest.raises(QueueFull, match="after waiting push_timeout"):
            bed.queue.push(bed.ex, {"n": 4})
        assert bed.aside() == []


@pytest.mark.postgresql
def test_concurrent_pushers_and_a_popper_lose_and_duplicate_nothing(
    request: pytest.FixtureRequest, table_name: str
) -> None:
    """Three producers push into an 8-slot spilling ring while a consumer pops: pushes land,
    spill, and spilled messages go back into the ring as slots free up, all at once."""
    with ring_bed("postgresql", request, table_name, when_full="spill", capacity=8,
                  **NO_WAIT) as bed:  # fmt: skip
        producing = threading.Event()
        producing.set()
        seen: list[int] = []

        def produce(k: int) -> None:
            ex = bed.connect()
            for i in range(150):
                bed.queue.push(ex, {"n": k * 1000 + i})

        def consume() -> None:
            ex = bed.connect()
            while producing.is_set():
                popped = bed.queue.pop_batch(ex, 4)
                seen.extend(m.payload["n"] for m in popped)
                bed.queue.ack(ex, popped)

        producers = [threading.Thread(target=produce, args=(k,)) for k in range(3)]
        consumer = threading.Thread(target=consume)
        for t in [*producers, consumer]:
            t.start()
        for t in producers:
            t.join()
        producing.clear()
        consumer.join()
        seen += drain(bed)
        assert sorted(seen) == sorted(k * 1000 + i for k in range(3) for i in range(150))
        assert spilled(bed) == []
