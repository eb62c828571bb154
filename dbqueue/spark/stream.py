"""Streaming consume: ``spark.readStream.format("dbqueue")`` — each micro-batch leases, the
batch's commit acknowledges.

Spark plans a micro-batch on the driver by asking for the latest offset, writes that offset to
the checkpoint's offset log, runs the batch, writes the commit log, and asks for the next
latest offset. The source maps that onto the queue:

* :meth:`~QueueStream.latestOffset` leases up to ``maxMessagesPerBatch`` items (at least once,
  lease ``leaseSeconds``) and returns them *as the offset*: ``{"batch": n, "runs": [[first,
  last, attempts], ...]}``, runs of consecutive ids leased with the same attempt count (a FIFO
  batch is one or a few runs). The offset log in the checkpoint therefore says exactly which
  items each batch holds, durably.
* :meth:`~QueueStream.read` reads the items of a batch's runs by id (executors), whatever their
  state: a batch replayed after a restart reads the same items again.
* Acknowledging: Spark asks for the next offset only after the batch that ended at ``start``
  is in the commit log (it runs one batch at a time, and a restart replays an uncommitted
  batch before it asks). So :meth:`~QueueStream.latestOffset` first acknowledges the items of
  ``start``, before it leases anything new, and :meth:`~QueueStream.commit` (Spark's own call
  for batch n - 1 once it logged batch n) does the same. Acks are fenced by the attempt count:
  an item whose lease expired and was leased again elsewhere is left alone.

The last batch of a query is acknowledged by the query's last look for more: an available-now
query (``trigger(availableNow=True)``) ends on one, so it stops with nothing leased. A
``trigger(once=True)`` query runs one batch and never looks again, and a query stopped before
its next trigger has not looked yet: their last batch stays leased and is acknowledged when the
query next starts from its checkpoint, before it leases anything (or replayed, if Spark had not
committed it).

While Spark works on a batch, the driver extends its leases (:mod:`dbqueue.spark.leases`), so a
slow batch keeps its items. A query that fails leaves its batch leased: restarted from its
checkpoint, Spark replays it (same items), then it is acknowledged. Items leased for a batch
that never reached the offset log come back when their lease expires. Nothing is lost or
skipped; a batch is delivered twice only when its leases ran out before the restart and
another consumer's rescue gave them back (at-least-once). Expired leases are given back by the
queue's rescue, which the stream runs itself, at most every ``rescueSeconds``, when it plans a
batch (as a worker does: a stream may be the queue's only consumer); so does the queue's upkeep
(:mod:`dbqueue.upkeep`: a split queue's heads, compaction of tables a long transaction grew). A
queue declared with ``keep_done`` needs ``keepDone=true``, so that acks mark items done instead
of deleting them.

Available now: :meth:`~QueueStream.prepareForTriggerAvailableNow` fixes where the query stops,
the items ready at its start (split: the newest id then ready, and the time; ring: the last
message number then handed out); the batches go up to there and no further, so items pushed,
retried or given back meanwhile wait for the next run. ``trigger(once=True)`` fixes the same
bound at its one batch, which Spark makes of everything available: one batch, whatever
``maxMessagesPerBatch`` says (Spark ignores read limits under Trigger.Once).

Progress: :meth:`~QueueStream.reportLatestOffset` gives Spark the source's counters (items
leased in the last batch, in flight, acknowledged, the backlog when the batch was planned, lease
extensions), which Spark shows as the source's ``latestOffset`` in ``query.lastProgress``:
PySpark's data sources have no custom metrics of their own.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import pyarrow as pa
from pyspark.sql import types as T
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from dbqueue.discovery import FoundQueue
from dbqueue.drivers.psycopg import PsycopgExecutor
from dbqueue.front import ExecutorFront
from dbqueue.message import Message
from dbqueue.ring import RingQueue
from dbqueue.spark.catalog import DIALECT, run, statements
from dbqueue.spark.connection import connect
from dbqueue.spark.leases import LeaseKeeper
from dbqueue.spark.reader import state_names, to_batch
from dbqueue.split import SplitQueue
from dbqueue.upkeep.compaction import CHECK_EVERY

Run = list[int]  # [first id, last id, attempts]
Token = tuple[int, int]

log = logging.getLogger("dbqueue.spark")

#: The most messages one pop of a ring's stream leases (see QueueStream._lease_ring).
RING_CHUNK = 1_000
#: Seconds between two counts of the backlog of an idle query (see _look_at_backlog).
BACKLOG_EVERY = 1.0


def to_runs(tokens: Sequence[Token]) -> list[Run]:
    """(id, attempts) tokens as runs of consecutive ids with equal attempts, ids ascending."""
    runs: list[Run] = []
    for item_id, attempts in sorted(tokens):
        if runs and runs[-1][1] == item_id - 1 and runs[-1][2] == attempts:
            runs[-1][1] = item_id
        else:
            runs.append([item_id, item_id, attempts])
    return runs


def to_tokens(runs: Sequence[Sequence[int]]) -> list[Token]:
    """The tokens of runs (see :func:`to_runs`)."""
    return [(i, attempts) for first, last, attempts in runs for i in range(first, last + 1)]


@dataclass(frozen=True, slots=True)
class Items(InputPartition):
    """One partition of a micro-batch: the ids it reads."""

    ids: tuple[int, ...]


@dataclass(slots=True)
class Bound:
    """Where an available-now (or once) query stops: split, the newest id ready at its start
    and that time; ring, the last message number handed out at its start."""

    until: int
    due_by: dt.datetime | None = None


@dataclass(slots=True)
class Counters:
    """What the source reports in ``query.lastProgress`` (see :meth:`QueueStream.metrics`)."""

    leased: int = 0
    acked: int = 0
    backlog: int | None = None
    backlog_at: float | None = None


class QueueStream(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The stream of one queue's items (the driver's side keeps a connection, the core queue
    and the leases in flight; executors only read)."""

    def __init__(
        self,
        info: str,
        queue: FoundQueue,
        schema: T.StructType,
        max_per_batch: int,
        lease: dt.timedelta,
        partitions: int,
        rescue_interval: dt.timedelta,
    ) -> None:
        self.info = info
        self.queue = queue
        self.schema = schema
        self.max_per_batch = max_per_batch
        self.lease = lease
        self.parts = partitions
        self.rescue_interval = rescue_interval.total_seconds()
        self._rescued_at: float | None = None
        self._looked_at: float | None = None
        self._core: SplitQueue | RingQueue | None = None
        self._conn: Any = None
        self._bound: Bound | None = None
        self._acked_through = -1
        self._counters = Counters()
        self._keeper: LeaseKeeper | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Executors get the description, never the driver's connection, queue or leases.
        return {**self.__dict__, "_core": None, "_conn": None, "_keeper": None}

    def _core_queue(self) -> SplitQueue | RingQueue:
        if self._core is None:
            core_class = RingQueue if self.queue.ring else SplitQueue
            self._core = core_class(self.queue.spec, DIALECT)
        return self._core

    def _driver(self) -> ExecutorFront[Message]:
        """The queue on the driver's connection, as the front layer runs it."""
        if self._conn is None or self._conn.closed:
            self._conn = connect(self.info)
        return ExecutorFront(self._core_queue(), PsycopgExecutor(self._conn))

    @property
    def keeper(self) -> LeaseKeeper:
        """The driver's batches in flight, their leases kept alive."""
        if self._keeper is None:
            self._keeper = LeaseKeeper(self.info, self._core_queue, self.lease)
        return self._keeper

    def initialOffset(self) -> dict[str, Any]:
        """Batch 0, no items."""
        return {"batch": 0, "runs": []}

    def getDefaultReadLimit(self) -> ReadLimit:
        """At most ``maxMessagesPerBatch`` items per micro-batch."""
        return ReadMaxRows(self.max_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix where an available-now query stops: the items ready now (see the module
        docstring)."""
        self._bound = self._bound_now()

    def _bound_now(self) -> Bound:
        self._driver()
        stmts = statements(self.queue.spec)
        if self.queue.ring:
            (push_next, _pop_next), *_ = run(self._conn, stmts["spark_numbers_ring"], {})
            return Bound(int(push_next) - 1)
        (until, now), *_ = run(self._conn, stmts["spark_target_split"], {})
        # No item ready: a bound below every id, so the query stops at once.
        return Bound(0 if until is None else int(until), now)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """Acknowledge the batch that ended at ``start`` (Spark has committed it), lease the
        next batch's items and return them as its end offset (see the module docstring);
        ``start`` when there is nothing to lease."""
        self._settle(start)
        if isinstance(limit, ReadMaxRows):
            n: int | None = max(1, min(self.max_per_batch, limit.max_rows))
        elif isinstance(limit, ReadAllAvailable):
            # Trigger.Once: one batch of everything ready now (Spark ignores read limits then).
            n = None
            if self._bound is None:
                self._bound = self._bound_now()
        else:  # pragma: no cover - Spark's own types
            raise TypeError(f"dbqueue: unsupported read limit {limit!r}")
        queue = self._driver()
        now = time.monotonic()
        if self._rescued_at is None or now - self._rescued_at >= self.rescue_interval:
            queue.rescue()
            self._rescued_at = now
        if self._looked_at is None or now - self._looked_at >= CHECK_EVERY:
            # As a worker's maintenance does: a long transaction elsewhere must neither slow
            # the pops of a queue that only a stream consumes nor leave its tables grown.
            queue.upkeep()
            self._looked_at = now
        tokens = self._lease(n)
        self._counters.leased = len(tokens)
        self._look_at_backlog(now, planned=bool(tokens))
        if not tokens:
            return start
        batch = int(start["batch"]) + 1
        self.keeper.hold(batch, tokens)
        return {"batch": batch, "runs": to_runs(tokens)}

    def _lease(self, n: int | None) -> list[Token]:
        """Lease up to ``n`` items (None: all), within the available-now bound if any."""
        bound = self._bound
        if self.queue.ring:
            if bound is not None:
                stmts = statements(self.queue.spec)
                (_push_next, pop_next), *_ = run(self._conn, stmts["spark_numbers_ring"], {})
                left = bound.until - int(pop_next) + 1
                n = left if n is None else min(n, left)
                if n <= 0:
                    return []
            # A ring's pops hand out its numbers in order: its own pop keeps the claims on
            # numbers whose pusher has not written yet (the core's claims, dbqueue.ring.claims).
            assert n is not None  # Trigger.Once fixed a bound
            return self._lease_ring(n)
        params = {
            "n": n,
            "lease": self.lease,
            "until": None if bound is None else bound.until,
            "due_by": None if bound is None else bound.due_by,
        }
        rows = run(self._conn, statements(self.queue.spec)["spark_lease_split"], params)
        return [(int(i), int(a)) for i, a in rows]

    def _lease_ring(self, n: int) -> list[Token]:
        """Lease up to ``n`` messages of a ring, ``RING_CHUNK`` per pop: a ring's pop compares
        each slot it takes with every claim it holds, so its cost grows with the square of its
        size (measured for 90,000 messages: one pop 31 s, pops of 10,000 6.7 s, of 1,000
        2.4 s)."""
        queue, tokens = self._driver(), []
        while n > 0:
            ask = min(n, RING_CHUNK)
            leased = queue.pop_batch(ask, lease=self.lease)
            tokens += [(m.id, m.attempts) for m in leased]
            if len(leased) < ask:
                break
            n -= ask
        return tokens

    def _look_at_backlog(self, now: float, planned: bool) -> None:
        """Count the ready items when a batch was planned, else at most once every
        ``BACKLOG_EVERY`` seconds (a count reads every ready row; an idle query asks often)."""
        c = self._counters
        if planned or c.backlog_at is None or now - c.backlog_at >= BACKLOG_EVERY:
            c.backlog = int(self._driver().stats()["ready"])
            c.backlog_at = now

    def _settle(self, end: dict[str, Any]) -> None:
        """Acknowledge the items of the batch that ended at ``end``, once."""
        batch = int(end["batch"])
        if batch <= self._acked_through:
            return
        tokens = to_tokens(end["runs"])
        with self.keeper.settling(batch):
            acked = self._driver().ack(tokens, strict=False) if tokens else []
            self._counters.acked += len(acked)
            if len(acked) < len(tokens):
                log.warning(
                    "dbqueue stream: batch %d: %d of %d items were no longer leased when it "
                    "was acknowledged (their leases ran out and a rescue gave them back: "
                    "delivered again); raise leaseSeconds",
                    batch,
                    len(tokens) - len(acked),
                    len(tokens),
                )
        self._acked_through = batch

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[Items]:
        """The end offset's items, in up to ``numPartitions`` slices of consecutive ids."""
        tokens = to_tokens(end["runs"]) if end["batch"] != start["batch"] else []
        if not tokens:
            return []
        if int(end["batch"]) > self._acked_through:
            # A batch replayed after a restart: its leases are kept alive while it runs too.
            self.keeper.hold(int(end["batch"]), tokens)
        ids = [i for i, _ in tokens]
        size = math.ceil(len(ids) / self.parts)
        return [Items(tuple(ids[i : i + size])) for i in range(0, len(ids), size)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The items of one slice, by id (executor)."""
        assert isinstance(partition, Items)
        stmts = statements(self.queue.spec)
        params = {"ids": list(partition.ids), "capacity": self.queue.spec.options.capacity}
        # A ring's items may also be in its side table: leases a pusher moved aside. Both
        # tables are read in one snapshot: read one after the other, an item moved between the
        # two reads was read twice.
        sources = ["ring", "failed"] if self.queue.ring else ["split"]
        with connect(self.info) as conn:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            with conn.transaction():
                # The lock first, the snapshot after it (see spark_lock_* in spark.sql).
                run(conn, stmts[f"spark_lock_{sources[0]}"], {})
                found = [
                    (source, run(conn, stmts[f"spark_items_{source}"], params))
                    for source in sources
                ]
        batches = [to_batch(rows, self.schema, state_names(src)) for src, rows in found if rows]
        yield from batches or [to_batch([], self.schema, {})]

    def commit(self, end: dict[str, Any]) -> None:
        """Acknowledge the items of the batch that ended at ``end`` (driver; Spark calls it
        for batch n - 1 once it logged batch n)."""
        self._settle(end)

    def metrics(self) -> dict[str, Any]:
        """The source's counters: ``leased`` (items in the batch just planned), ``inFlight``
        (leased, not yet acknowledged), ``acked`` and ``leasesExtended`` (since the query
        started), ``leasesLost`` (extensions that found an item given back), ``backlog``
        (ready items when a batch was last planned, counted at most once a second)."""
        c = self._counters
        keeper = self._keeper
        return {
            "leased": c.leased,
            "inFlight": keeper.held() if keeper else 0,
            "acked": c.acked,
            "backlog": c.backlog,
            "leasesExtended": keeper.extended if keeper else 0,
            "leasesLost": keeper.lost if keeper else 0,
        }

    def reportLatestOffset(self) -> dict[str, Any]:
        """The source's counters (:meth:`metrics`) and the last batch acknowledged, shown by
        Spark as this source's ``latestOffset`` in the query's progress."""
        return {"ackedThrough": self._acked_through, **self.metrics()}

    def stop(self) -> None:
        """Stop extending leases and close the driver's connection (batches in flight keep
        their leases until they run out; see the module docstring)."""
        if self._keeper is not None:
            self._keeper.stop()
        if self._conn is not None:
            self._conn.close()
            self._conn = None
