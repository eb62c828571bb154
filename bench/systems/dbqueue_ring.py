"""dbqueue's ring queue, through the core directly (no framework).

A ring holds at most ``capacity`` messages, so the harness tells each system, before a run,
the most messages the workload keeps in the queue at once (:meth:`System.expect`); the ring
is rebuilt with :func:`ring_capacity` slots for it at its next reset. Worker processes, which
construct the system from its DSN alone, read the capacity from the table (its slot count).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Self

from bench.systems.dbqueue_core import POSTGRESQL, AckPopLoop, CoreSystem
from dbqueue import Field, FieldKind, QueueFull, QueueOptions, QueueSpec, RingQueue
from dbqueue.schema import create_ring_statements, drop_ring_statements

if TYPE_CHECKING:
    from collections.abc import Callable

    from bench.env import BenchEnv

RING_TABLE = "bench_ring"
FIELDS = (Field("payload", FieldKind.TEXT),)
#: The smallest ring the harness builds: room for the in-flight batches of every workload
#: that keeps only a few batches in the queue (cycle, pairs, the bloat soak's 1,000).
MIN_CAPACITY = 1000


#: What the report says about the rings' sizes.
CAPACITY_NOTE = (
    "ring capacity: each workload's ring has twice as many slots as the workload keeps "
    f"messages in the queue at once, at least {MIN_CAPACITY:,}: push_single and push_batch "
    "the messages pushed, drain the backlog, cycle and pairs the batches in flight (the "
    "ack_pop loop keeps the batch it handled leased while it pushes the next), the bloat soak "
    "its batch of 1,000, steady every message the producers push in the run, longtx 5 s of "
    "them (a ring sized for the whole run is never lapped)"
)


def ring_capacity(depth: int) -> int:
    """The slots a ring gets for a workload that keeps at most ``depth`` messages in it: twice
    that, as the ring how-to advises (a ring nearly full of leases makes its pushers move them
    aside), never less than :data:`MIN_CAPACITY`. (A fixed-capacity front end, such as a
    Django model, would declare the largest its workloads ask for.)"""
    return max(MIN_CAPACITY, 2 * depth)


def ring_spec(capacity: int) -> QueueSpec:
    """The benchmark ring (one 300-character text payload) with ``capacity`` slots."""
    return QueueSpec(RING_TABLE, FIELDS, QueueOptions(capacity=capacity))


class DBQueueRing(CoreSystem):
    name = "dbqueue-ring"
    label = "dbqueue ring queue, core API"
    workloads = frozenset(
        {"push_single", "push_batch", "drain", "cycle", "pairs", "steady", "bloat", "longtx",
         "stuck"}
    )  # fmt: skip
    tables = (RING_TABLE, f"{RING_TABLE}_failed")

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self._capacity: int | None = None
        self._queue: RingQueue | None = None
        #: An experiment's statements for the ring, given its spec, instead of
        #: dbqueue.schema's (bench/ring_storage.py: another fillfactor; bench/
        #: ring_partitions.py: a partitioned slot table); and the least capacity it wants.
        self.create_statements: Callable[[QueueSpec], list[str]] | None = None
        self.min_capacity = 0

    @classmethod
    def create(cls, env: BenchEnv) -> Self:
        if CAPACITY_NOTE not in env.notes:
            env.notes.append(CAPACITY_NOTE)
        return super().create(env)

    @property
    def capacity(self) -> int:
        """The ring's slots: chosen by :meth:`expect` here, read from the table in a worker."""
        if self._capacity is None:
            row = self.ex.execute(f"SELECT count(*) FROM {RING_TABLE}", {})[0]
            self._capacity = int(row[0])
        return self._capacity

    @property
    def queue(self) -> RingQueue:
        if self._queue is None:
            self._queue = RingQueue(ring_spec(self.capacity), POSTGRESQL)
        return self._queue

    def expect(self, depth: int) -> None:
        self._capacity = max(self.min_capacity, ring_capacity(depth))

    def install(self) -> None:
        self._capacity = self._capacity or MIN_CAPACITY
        self._build()

    def reset(self) -> None:
        """Rebuild the ring at the expected capacity: slots, sequences and this process's
        pending claims start afresh (a TRUNCATE would remove the preallocated slots)."""
        self.run(drop_ring_statements(self.queue.spec, POSTGRESQL))
        self._build()

    def _build(self) -> None:
        self._queue = None
        spec = self.queue.spec
        build = self.create_statements or (lambda s: create_ring_statements(s, POSTGRESQL))
        self.run(build(spec))

    def push_batch(self, n: int, batch: int) -> None:
        """A batch push that meets a full ring is reported on stderr, not fatal: the run goes
        on and its figure shows what the full ring cost. (Once in several 30-s runs of four
        pairs of 100 in 1,000 slots, with no sweeper running, a push met a full ring after
        its push_timeout; the worker, whose maintenance rescues the ring, is what users run.)"""
        try:
            super().push_batch(n, batch)
        except QueueFull as exc:
            print(f"{self.name}: {exc}", file=sys.stderr, flush=True)


class DBQueueRingLoop(AckPopLoop, DBQueueRing):
    """The ring popped by the worker's loop (ack_pop): settle the batch handled and lease the
    next in one statement."""

    name = "dbqueue-ring-loop"
    label = "dbqueue ring queue, core API, ack_pop loop"
    database = "dbqueue_ring"
    workloads = frozenset({"cycle", "pairs", "stuck"})


class DBQueueRingAtMostOnce(DBQueueRing):
    """The ring popped at most once: one statement per batch, no ack (as the naive queue)."""

    name = "dbqueue-ring-amo"
    label = "dbqueue ring queue, core API, at-most-once pops"
    database = "dbqueue_ring"
    workloads = frozenset({"cycle", "pairs", "bloat"})

    def take(self, batch: int) -> int:
        return len(self.queue.pop_batch(self.ex, batch, mode="at_most_once"))
