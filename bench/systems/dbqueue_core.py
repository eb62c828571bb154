"""dbqueue's split queue, through the core directly (no framework)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg

from bench.systems.base import IDLE_SLEEP, PAYLOAD, System, Tally
from dbqueue import Field, FieldKind, QueueSpec, SplitQueue, get_dialect
from dbqueue.drivers.psycopg import PsycopgExecutor
from dbqueue.schema import create_statements

SPEC = QueueSpec("bench_split", (Field("payload", FieldKind.TEXT),))


class DBQueueCore(System):
    name = "dbqueue-core"
    label = "dbqueue split queue, core API"
    workloads = frozenset(
        {"push_single", "push_batch", "drain", "cycle", "steady", "bloat", "longtx"}
    )
    tables = (SPEC.table, SPEC.meta_table)

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.queue = SplitQueue(SPEC, get_dialect("postgresql"))
        self._ex: PsycopgExecutor | None = None

    @property
    def ex(self) -> PsycopgExecutor:
        if self._ex is None or self._ex.connection.closed:
            self._ex = PsycopgExecutor(psycopg.connect(self.dsn, autocommit=True))
        return self._ex

    def install(self) -> None:
        for statement in create_statements(SPEC, self.queue.dialect):
            self.ex.execute(statement, {})

    def reset(self) -> None:
        self.ex.execute(f"TRUNCATE {SPEC.table}, {SPEC.meta_table}", {})

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
        with psycopg.connect(self.dsn) as conn:
            row = conn.execute(f"SELECT count(*) FROM {SPEC.meta_table}").fetchone()
            return int(row[0])  # type: ignore[index]

    def drain(self, batch: int) -> Tally:
        tally, q, ex = Tally(), self.queue, self.ex
        while items := q.pop_batch(ex, batch):
            for _item in items:
                pass  # the no-op handler
            q.ack(ex, items)
            tally.add(len(items))
        return tally

    def push_payload(self, payload: str) -> None:
        self.queue.push(self.ex, {"payload": payload})

    def serve(self, batch: int, seconds: float, handle: Callable[[str], None]) -> Tally:
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

    def cycle_once(self, batch: int) -> int:
        q, ex = self.queue, self.ex
        q.push_many(ex, [{"payload": PAYLOAD}] * batch)
        items = q.pop_batch(ex, batch)
        q.ack(ex, items)
        return len(items)


class DBQueueCoreAtMostOnce(DBQueueCore):
    """The same queue popped at-most-once: one statement per batch, no ack round trip."""

    name = "dbqueue-core-amo"
    label = "dbqueue split queue, core API, at-most-once pops"
    database = "dbqueue_core"

    def drain(self, batch: int) -> Tally:
        tally, q, ex = Tally(), self.queue, self.ex
        while items := q.pop_batch(ex, batch, mode="at_most_once"):
            tally.add(len(items))
        return tally

    def cycle_once(self, batch: int) -> int:
        q, ex = self.queue, self.ex
        q.push_many(ex, [{"payload": PAYLOAD}] * batch)
        return len(q.pop_batch(ex, batch, mode="at_most_once"))
