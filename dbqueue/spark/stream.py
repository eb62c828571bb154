"""Streaming consume: ``spark.readStream.format("dbqueue")`` — each micro-batch leases, the
commit acknowledges.

Spark plans a micro-batch on the driver by asking for the latest offset, writes that offset to
the checkpoint's offset log, runs the batch, writes the commit log, and later calls
:meth:`QueueStream.commit` with the batch's end offset. The source maps that onto the queue:

* :meth:`~QueueStream.latestOffset` leases up to ``maxMessagesPerBatch`` items (at least once,
  lease ``lease`` seconds) and returns them *as the offset*: ``{"batch": n, "runs": [[first,
  last, attempts], ...]}``, runs of consecutive ids leased with the same attempt count (a FIFO
  batch is one or a few runs). The offset log in the checkpoint therefore says exactly which
  items each batch holds, durably.
* :meth:`~QueueStream.read` reads the items of a batch's runs by id (executors), whatever their
  state: a batch replayed after a restart reads the same items again.
* :meth:`~QueueStream.commit` acknowledges exactly the items of the batch (fenced by the attempt
  count, so an item whose lease expired and was leased again elsewhere is left alone).

A query that fails or is stopped before a batch is committed leaves that batch's items leased:
restarted from its checkpoint, Spark replays the batch (same items), then commits it. Items
leased for a batch that never reached the offset log come back when their lease expires.
Nothing is lost or skipped; the lease must outlast a batch's processing and a restart, or the
items are delivered again (at-least-once). Expired leases are given back by the queue's rescue,
which the stream runs itself, at most every ``rescueSeconds``, when it plans a batch (as a
worker does: a stream may be the queue's only consumer); so does compaction, when a long
transaction makes the tables grow (:mod:`dbqueue.compaction`). A queue declared with ``keep_done``
needs ``keepDone=true``, so that acks mark items done instead of deleting them.

Spark commits batch n only when it logs batch n + 1, and logs no batch while the source has
nothing new: the last batch before the queue runs dry would stay leased. So when nothing new
is leased but the previous batch has items, the offset moves on to an empty batch, whose
planning commits the previous one.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import pyarrow as pa
from pyspark.sql import types as T
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from dbqueue.compaction import CHECK_EVERY
from dbqueue.discovery import FoundQueue
from dbqueue.drivers.psycopg import PsycopgExecutor
from dbqueue.front import ExecutorFront
from dbqueue.message import Message
from dbqueue.ring import RingQueue
from dbqueue.spark.catalog import DIALECT, run, statements
from dbqueue.spark.connection import connect
from dbqueue.spark.reader import state_names, to_batch
from dbqueue.split import SplitQueue

Run = list[int]  # [first id, last id, attempts]
Token = tuple[int, int]


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


class QueueStream(DataSourceStreamReader):
    """The stream of one queue's items (the driver's side keeps a connection and the core
    queue; executors only read)."""

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

    def __getstate__(self) -> dict[str, Any]:
        # Executors get the description, never the driver's connection or queue.
        return {**self.__dict__, "_core": None, "_conn": None}

    def _driver(self) -> ExecutorFront[Message]:
        """The queue on the driver's connection, as the front layer runs it."""
        if self._conn is None or self._conn.closed:
            self._conn = connect(self.info)
        if self._core is None:
            core_class = RingQueue if self.queue.ring else SplitQueue
            self._core = core_class(self.queue.spec, DIALECT)
        return ExecutorFront(self._core, PsycopgExecutor(self._conn))

    def initialOffset(self) -> dict[str, Any]:
        """Batch 0, no items."""
        return {"batch": 0, "runs": []}

    def getDefaultReadLimit(self) -> ReadLimit:
        """At most ``maxMessagesPerBatch`` items per micro-batch."""
        return ReadMaxRows(self.max_per_batch)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """Lease the next batch's items and return them as its end offset (see the module
        docstring); ``start`` when there is nothing to lease or commit."""
        n = self.max_per_batch
        if isinstance(limit, ReadMaxRows):
            n = max(1, min(n, limit.max_rows))
        elif not isinstance(limit, ReadAllAvailable):  # pragma: no cover - Spark's own types
            raise TypeError(f"dbqueue: unsupported read limit {limit!r}")
        queue = self._driver()
        now = time.monotonic()
        if self._rescued_at is None or now - self._rescued_at >= self.rescue_interval:
            queue.rescue()
            self._rescued_at = now
        if self._looked_at is None or now - self._looked_at >= CHECK_EVERY:
            # As a worker's maintenance does: a long transaction elsewhere must not make the
            # tables of a queue that only a stream consumes grow without bound.
            queue.compact_if_grown()
            self._looked_at = now
        leased = queue.pop_batch(n, lease=self.lease)
        if leased:
            runs = to_runs([(m.id, m.attempts) for m in leased])
            return {"batch": int(start["batch"]) + 1, "runs": runs}
        if start["runs"]:
            return {"batch": int(start["batch"]) + 1, "runs": []}
        return start

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[Items]:
        """The end offset's items, in up to ``numPartitions`` slices of consecutive ids."""
        ids = [i for i, _ in to_tokens(end["runs"])] if end["batch"] != start["batch"] else []
        if not ids:
            return []
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
        """Acknowledge the items of the batch that ended at ``end`` (driver)."""
        tokens = to_tokens(end["runs"])
        if tokens:
            self._driver().ack(tokens)

    def stop(self) -> None:
        """Close the driver's connection (leased, uncommitted items come back by lease)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
