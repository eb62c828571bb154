"""A slot a consumer holds never blocks producers, and a push inside a transaction writes each
message once (issue: "The ring earns its place", sections 2 and 3).

Stuck slots of each kind, in a ring of 64: a message leased by a consumer that died, one
waiting out a retry's back-off, one whose pop number a popper claimed before dying (PostgreSQL:
numbers are not transactional). 2,000 single pushes, each popped and acked, go through with no
QueueFull and no backpressure wait, at a cost in statements close to the run without the stuck
slot: a structural measure, never a timer (the throughput itself is measured by the bench's
``stuck`` workload, ``python -m bench``). The stuck message is not lost: its consumer's ack
still finds it, or it comes back for another delivery.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any

import pytest

from dbqueue import Message, QueueFull, State
from dbqueue.executor import Executor, Row
from tests.core.ringbed import BACKENDS, RingBed, ring_bed

CAPACITY = 64
MESSAGES = 2_000
HOUR = dt.timedelta(hours=1)


class Counting:
    """An executor that counts the statements it runs and the backpressure sleeps asked of it."""

    def __init__(self, inner: Executor) -> None:
        self.inner = inner
        self.dialect = inner.dialect
        self.statements: Counter[str] = Counter()
        self.sleeps = 0

    def execute(self, sql: str, params: Mapping[str, Any]) -> list[Row]:
        self.statements[sql.split("\n", 1)[0][:60]] += 1
        return self.inner.execute(sql, params)

    def in_transaction(self) -> bool:
        return self.inner.in_transaction()

    def atomic(self) -> AbstractContextManager[object]:
        return self.inner.atomic()

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1

    @property
    def total(self) -> int:
        return sum(self.statements.values())


#: The protocol's own timeouts (hole_timeout 2 s, stranded_after 30 s), not the fast ones of
#: the other ring tests: a stuck slot must not wait for them.
OPTIONS = {"hole_timeout": dt.timedelta(seconds=2), "stranded_after": dt.timedelta(seconds=30)}
#: (backend, kind): SQLite pops take their numbers in the pop's transaction, so no popper can
#: die holding a claim there.
CASES = [
    pytest.param(backend.values[0], kind, marks=backend.marks, id=f"{backend.id}-{kind}")
    for backend in BACKENDS
    for kind in ("leased", "retrying", "claimed")
    if not (backend.values[0] == "sqlite" and kind == "claimed")
]


@pytest.fixture(params=BACKENDS)
def bed(request: pytest.FixtureRequest, table_name: str) -> Iterator[RingBed]:
    with ring_bed(request.param, request, table_name, capacity=CAPACITY, **OPTIONS) as b:
        yield b


@pytest.fixture
def stuck_bed(request: pytest.FixtureRequest, table_name: str) -> Iterator[RingBed]:
    backend = request.node.callspec.params["backend"]
    with ring_bed(backend, request, table_name, capacity=CAPACITY, **OPTIONS) as b:
        yield b


def make_stuck(bed: RingBed, kind: str) -> Message | None:
    """One stuck message of ``kind`` at the head of the ring; the leased one's delivery."""
    q, ex = bed.queue, bed.ex
    q.push(ex, {"n": -1})
    if kind == "claimed":
        bed.dead_popper()
        return None
    (m,) = q.pop_batch(ex, 1, lease=HOUR)
    if kind == "retrying":
        q.fail(ex, m, "boom", delay=HOUR)
        return None
    return m  # leased: its consumer died (or is slow)


def churn(bed: RingBed, ex: Executor, count: int) -> list[int]:
    """``count`` single pushes, each followed by a pop (at least once) and its ack, then pops
    until the ring is drained; the payloads seen, in delivery order. (A pop may come back empty
    once per number a pusher gave up on, the message it would have been then taken by the
    next pop: the drain collects what is left.)"""
    q, seen = bed.queue, []
    for i in range(count):
        q.push(ex, {"n": i})
        seen += take(q, ex, 1)
    while more := take(q, ex, 10):
        seen += more
    return seen


def take(q: Any, ex: Executor, n: int) -> list[int]:
    popped = q.pop_batch(ex, n)
    q.ack(ex, popped)
    return [m.payload["n"] for m in popped]


@pytest.mark.parametrize(("backend", "kind"), CASES)
def test_a_stuck_slot_never_blocks_pushers(stuck_bed: RingBed, backend: str, kind: str) -> None:
    bed = stuck_bed
    baseline = Counting(bed.ex)
    assert churn(bed, baseline, MESSAGES) == list(range(MESSAGES))
    stuck = make_stuck(bed, kind)
    counting = Counting(bed.ex)
    seen = churn(bed, counting, MESSAGES)  # no QueueFull
    assert counting.sleeps == 0  # no push ever waited
    assert [n for n in seen if n >= 0] == list(range(MESSAGES))
    # Each lap's push that meets the stuck slot pays a statement or two, not a wait.
    assert counting.total <= 1.2 * baseline.total, counting.statements
    if stuck is not None:  # moved aside with its token: its consumer's ack still works
        assert bed.queue.ack(bed.ex, stuck) == [stuck.id]
    elif -1 not in seen:
        # A stranded message: put aside by a pusher that met it once it was older than
        # hole_timeout, or (a churn faster than that) still in its slot until the sweeper
        # finds it stranded. Either way it comes back, not lost.
        bed.expire_leases()
        bed.age_messages()
        bed.queue.rescue(bed.ex)
        back = bed.queue.pop_batch(bed.ex, 10, mode="at_most_once")
        assert [m.payload["n"] for m in back] == [-1]  # delivered again, not lost
    stats = bed.queue.stats(bed.ex)
    assert (stats.ready, stats.leased, stats.scheduled) == (0, 0, 0)


# Alone (the solo pass): a transaction that another xdist worker's test holds open pins the
# horizon of every database of the server, and the ring then grows by the versions it keeps.
@pytest.mark.solo
@pytest.mark.parametrize(("backend", "kind"), CASES)
def test_a_push_in_a_transaction_passes_a_stuck_slot_without_growing_the_ring(
    stuck_bed: RingBed, backend: str, kind: str
) -> None:
    """In a caller's transaction a push never moves a stuck message (that would lock its row
    until the caller commits): it takes another number, and writes each message once. After
    300 transactions of 5 messages, single pushes and push_many, the ring is no bigger."""
    bed = stuck_bed
    stuck = make_stuck(bed, kind)
    before = bed.size()
    counting = Counting(bed.ex)
    q, seen = bed.queue, []
    for t in range(300):
        with counting.atomic():
            if t % 2:
                q.push_many(counting, [{"n": t * 5 + i} for i in range(5)])
            else:
                for i in range(5):
                    q.push(counting, {"n": t * 5 + i})
        seen += [m.payload["n"] for m in q.pop_batch(counting, 5, mode="at_most_once")]
    while more := q.pop_batch(counting, 10, mode="at_most_once"):
        seen += [m.payload["n"] for m in more]
    assert sorted(seen) == list(range(1500))  # each written once, none lost
    assert counting.sleeps == 0
    assert bed.size() <= 1.1 * before, (before, bed.size())
    if stuck is not None:
        assert q.ack(bed.ex, stuck) == [stuck.id]


def test_ten_percent_of_the_slots_stuck_never_make_a_ring_with_free_slots_full(
    bed: RingBed,
) -> None:
    q, ex = bed.queue, bed.ex
    q.push_many(ex, [{"n": -i} for i in range(1, 7)])
    stuck = q.pop_batch(ex, 6, lease=HOUR)  # 6 of 64 slots held by consumers that died
    pushed = q.push_many(ex, [{"n": i} for i in range(CAPACITY)])  # every slot's worth
    assert len(pushed) == CAPACITY  # the leased messages were moved aside, not waited for
    with pytest.raises(QueueFull):
        q.push(ex, {"n": 99})  # now it is full: 64 undelivered messages in its slots
    assert sorted(q.ack(ex, stuck)) == sorted(m.id for m in stuck)  # found aside
    assert [m.payload["n"] for m in q.pop_batch(ex, CAPACITY)] == list(range(CAPACITY))


def test_a_failed_attempt_leaves_its_slot_at_once(bed: RingBed) -> None:
    q, ex = bed.queue, bed.ex
    q.push(ex, {"n": 1})
    (m,) = q.pop_batch(ex, 1)
    assert q.fail(ex, m, "boom", delay=HOUR) == {m.id: State.READY}
    assert [s for _, _, s in bed.slots()] == [0] * CAPACITY
    assert bed.aside() == [(m.id, State.READY)]
    assert len(q.push_many(ex, [{"n": i} for i in range(CAPACITY)])) == CAPACITY
