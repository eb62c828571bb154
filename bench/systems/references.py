"""The references every figure is divided by: the thin psycopg loop (the floor for any Python
client) and the naive table queue (the design everybody starts with)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import ClassVar

import psycopg

from bench.systems.base import IDLE_SLEEP, PAYLOAD, System, Tally


class Thin(System):
    """INSERT one row per message; DELETE a batch ... FOR UPDATE SKIP LOCKED: the naive
    baseline."""

    name = "thin"
    label = "thin psycopg loop (reference)"
    workloads = frozenset(
        {"push_single", "push_batch", "drain", "cycle", "pairs", "steady", "bloat", "longtx"}
    )
    table: ClassVar[str] = "thin_q"
    tables = ("thin_q",)
    pop_sql: ClassVar[str] = (
        "DELETE FROM thin_q WHERE id IN (SELECT id FROM thin_q ORDER BY id "
        "FOR UPDATE SKIP LOCKED LIMIT %s) RETURNING payload"
    )

    def _conn(self) -> psycopg.Connection:
        conn = getattr(self, "_connection", None)
        if conn is None or conn.closed:
            conn = self._connection = psycopg.connect(self.dsn, autocommit=True)
        return conn

    def install(self) -> None:
        self._conn().execute(
            f"CREATE TABLE {self.table} (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
            "payload text NOT NULL)"
        )

    def reset(self) -> None:
        self._conn().execute(f"TRUNCATE {self.table}")

    def close(self) -> None:
        if getattr(self, "_connection", None) is not None:
            self._connection.close()

    def push_single(self, n: int) -> None:
        cur = self._conn().cursor()
        sql = f"INSERT INTO {self.table} (payload) VALUES (%s)"
        for _ in range(n):
            cur.execute(sql, (PAYLOAD,), prepare=True)

    def push_batch(self, n: int, batch: int) -> None:
        cur = self._conn().cursor()
        sql = f"INSERT INTO {self.table} (payload) SELECT unnest(%s::text[])"
        for start in range(0, n, batch):
            cur.execute(sql, ([PAYLOAD] * min(batch, n - start),), prepare=True)

    def depth(self) -> int:
        with psycopg.connect(self.dsn) as conn:
            return int(conn.execute(f"SELECT count(*) FROM {self.table}").fetchone()[0])  # type: ignore[index]

    def drain(self, batch: int) -> Tally:
        tally = Tally()
        cur = self._conn().cursor()
        while True:
            rows = cur.execute(self.pop_sql, (batch,), prepare=True).fetchall()
            if not rows:
                return tally
            for _row in rows:
                pass  # the no-op handler
            tally.add(len(rows))

    def push_payload(self, payload: str) -> None:
        sql = f"INSERT INTO {self.table} (payload) VALUES (%s)"
        self._conn().execute(sql, (payload,), prepare=True)

    def serve(self, batch: int, seconds: float, handle: Callable[[str], None]) -> Tally:
        tally, cur = Tally(), self._conn().cursor()
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            rows = cur.execute(self.pop_sql, (batch,), prepare=True).fetchall()
            if not rows:
                time.sleep(IDLE_SLEEP)
                continue
            for (payload,) in rows:
                handle(payload)
            tally.add(len(rows))
        return tally

    def take(self, batch: int) -> int:
        return len(self._conn().execute(self.pop_sql, (batch,), prepare=True).fetchall())


class Naive(Thin):
    """The naive table queue: INSERT, and DELETE the lowest ids — no SKIP LOCKED, so
    concurrent consumers queue up behind each other's row locks."""

    name = "naive"
    label = "naive table queue (baseline)"
    table = "naive_q"
    tables = ("naive_q",)
    pop_sql = (
        "DELETE FROM naive_q WHERE id IN (SELECT id FROM naive_q ORDER BY id LIMIT %s "
        "FOR UPDATE) RETURNING payload"
    )
