"""dbqueue's split queue, through the core directly (no framework)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg

from bench.systems.base import IDLE_SLEEP, PAYLOAD, System, Tally
from dbqueue import Field, FieldKind, QueueSpec, RingQueue, SplitQueue, get_dialect
from dbqueue.drivers.psycopg import PsycopgExecutor
from dbqueue.schema import create_statements

SPEC = QueueSpec("bench_split", (Field("payload", FieldKind.TEXT),))
POSTGRESQL = get_dialect("postgresql")


class CoreSystem(System):
    """A dbqueue layout through the core API on one autocommit psycopg connection: what the
    split and ring systems share (they differ in their queue and how they build its tables)."""

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self._ex: PsycopgExecutor | None = None

    @property
    def queue(self) -> SplitQueue | RingQueue:
        """The queue object the operations go through."""
        raise NotImplementedError

    @property
    def ex(self) -> PsycopgExecutor:
        if self._ex is None or self._ex.connection.closed:
            self._ex = PsycopgExecutor(psycopg.connect(self.dsn, autocommit=True))
        return self._ex

    def run(self, statements: list[str]) -> None:
        """Run DDL statements on the producer's connection."""
        for statement in statements:
            self.ex.execute(statement, {})

    def close(self) -> None:
        if self._ex is not None:
            self._ex.connection.close()

    def push_single(self, n: int) -> None:
        push, ex, payload = self.queue.push, self.ex, {"payload": PAYLOAD}
        for _ in range(n):
            push(ex, payload)

    def push_batch(self, n: int, batch: int) -> None:
        rows: list[dict[str, Any]] = [{"payload": PAYLOAD}] * batch
        for start in range(0, n, batch):
            self.queue.push_many(self.ex, rows[: min(batch, n - start)], batch_size=batch)

    def depth(self) -> int:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            stats = self.queue.stats(PsycopgExecutor(conn))
        return stats.ready + stats.scheduled + stats.leased

    def drain(self, batch: int) -> Tally:
        tally = Tally()
        while taken := self.take(batch):
            tally.add(taken)
        return tally

    def take(self, batch: int) -> int:
        q, ex = self.queue, self.ex
        items = q.pop_batch(ex, batch)
        for _item in items:
            pass  # the no-op handler
        # strict=False: what a worker acks with (what is still leased under its token); a
        # strict ack (the API's default) checks every token first.
        q.ack(ex, items, strict=False)
        return len(items)

    def push_payload(self, payload: str) -> None:
        self.queue.push(self.ex, {"payload": payload})

    def serve(self, batch: int, seconds: float, handle: Callable[[str], None]) -> Tally:
        """Pop, handle and ack, through the API alone: the queue's upkeep (heads, compaction
        after a long transaction) is the keeper's, in the background of this process
        (dbqueue.upkeep.keeper), as for any consumer of the application's own."""
        tally, q, ex = Tally(), self.queue, self.ex
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            items = q.pop_batch(ex, batch)
            if not items:
                time.sleep(IDLE_SLEEP)
                continue
            for item in items:
                handle(item.payload["payload"])
            q.ack(ex, items)
            tally.add(len(items))
        return tally


class DBQueueCore(CoreSystem):
    name = "dbqueue-core"
    label = "dbqueue split queue, core API"
    workloads = frozenset(
        {"push_single", "push_batch", "drain", "cycle", "pairs", "steady", "bloat", "longtx"}
    )
    tables = (SPEC.table, SPEC.meta_table, SPEC.head_table)

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self._queue = SplitQueue(SPEC, POSTGRESQL)

    @property
    def queue(self) -> SplitQueue:
        return self._queue

    def install(self) -> None:
        self.run(create_statements(SPEC, POSTGRESQL))

    def reset(self) -> None:
        self.ex.execute(f"TRUNCATE {SPEC.table}, {SPEC.meta_table}, {SPEC.head_table}", {})


class AckPopLoop(CoreSystem):
    """A popper that settles the batch it handled and takes the next in one call (``ack_pop``,
    the worker's loop: one statement and one commit per batch instead of two)."""

    _handled: list[Any] | None = None

    def expect(self, depth: int) -> None:
        """The batch handled stays leased while the next is pushed: twice the messages in
        the queue at once. (A ring sized for half of them runs nearly full of leases, and its
        pushers move them aside: 4 pairs of 100 in 1,000 slots ran at a tenth of the rate.)"""
        super().expect(2 * depth)

    def take(self, batch: int) -> int:
        q, ex = self.queue, self.ex
        if self._handled:
            _, items = q.ack_pop(ex, self._handled, batch)
        else:
            items = q.pop_batch(ex, batch)
        self._handled = items  # the no-op handler ran: acked by the next take
        return len(items)


class DBQueueCoreLoop(AckPopLoop, DBQueueCore):
    """The split queue popped by the worker's loop (ack_pop)."""

    name = "dbqueue-core-loop"
    label = "dbqueue split queue, core API, ack_pop loop"
    database = "dbqueue_core"
    workloads = frozenset({"cycle", "pairs"})


class DBQueueCoreAtMostOnce(DBQueueCore):
    """The same queue popped at-most-once: one statement per batch, no ack round trip."""

    name = "dbqueue-core-amo"
    label = "dbqueue split queue, core API, at-most-once pops"
    database = "dbqueue_core"
    # The pairs would repeat dbqueue-core's figures: its producers and consumers are the same.
    workloads = DBQueueCore.workloads - {"pairs"}

    def take(self, batch: int) -> int:
        return len(self.queue.pop_batch(self.ex, batch, mode="at_most_once"))
