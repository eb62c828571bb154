"""The pusher and popper processes of the ring concurrency tests (test_ring_concurrency.py).

Run as ``python -m tests.reliability.ringworker ROLE --config JSON --worker W ...``. Every
process keeps its own books in tables beside the ring, written so that a ``kill -9`` at any
instant leaves them exact:

* ``<t>_pushed (key, worker)``: written in the same transaction as the push, so a key is
  listed if and only if its push committed (a killed pusher's push rolls back with it); or,
  with ``--autocommit`` (pushes committing on their own, the common use), right after it,
  for pushers that are not killed;
* ``<t>_seen (worker, key, number, attempts)``: one row per delivery a popper got. An
  at-least-once popper writes it after the pop committed and before the ack; an at-most-once
  popper after its pop; a transactional popper in the pop's own transaction;
* ``<t>_acked (worker, key, number)``: written in the same transaction as the ack, one row per
  message the ack removed;
* ``<t>_refused (worker, key, number, lease_until, at)``: a live popper's ack that found its
  lease gone (expired and fenced), in the ack's transaction, with the lease it held;
* ``<t>_swept (worker, ready, failed, holes)``: what each sweeper run (``rescue``) did.

A popper exits 0 on SIGTERM after finishing the batch in hand; a payload that does not match
its key (a message mixed up with another) makes it exit 3.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import random
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import psycopg
from psycopg import sql

from dbqueue import (
    DeliveryMode,
    Field,
    FieldKind,
    Message,
    QueueOptions,
    QueueSpec,
    RescueResult,
    RingQueue,
    get_dialect,
)
from dbqueue.drivers import executor_for

FIELDS = (Field("key", FieldKind.BIGINT), Field("body", FieldKind.TEXT))
DIALECT = get_dialect("postgresql")
PAYLOAD_MISMATCH = 3


@dataclass(frozen=True)
class Config:
    """What every process of one run shares: the database, the ring and its short timeouts."""

    dsn: str
    table: str
    capacity: int
    lease: float = 2.0
    stranded_after: float = 2.0
    hole_timeout: float = 0.5
    push_timeout: float = 60.0

    def spec(self) -> QueueSpec:
        """The ring's spec, the same in the test and in every worker process."""
        options = QueueOptions(
            capacity=self.capacity,
            lease=dt.timedelta(seconds=self.lease),
            stranded_after=dt.timedelta(seconds=self.stranded_after),
            hole_timeout=dt.timedelta(seconds=self.hole_timeout),
            push_timeout=dt.timedelta(seconds=self.push_timeout),
            # Re-deliveries are what these tests cause on purpose: never fail a message.
            max_attempts=1000,
        )
        return QueueSpec(self.table, FIELDS, options)

    def book(self, name: str) -> sql.Identifier:
        """One of the bookkeeping tables (``pushed``, ``seen``, ``acked``, ``refused``)."""
        return sql.Identifier(f"{self.table}_{name}")

    def to_json(self) -> str:
        return json.dumps(asdict(self))


BOOKS = {
    "pushed": "key bigint NOT NULL, worker integer NOT NULL",
    "seen": "worker integer NOT NULL, key bigint NOT NULL, number bigint NOT NULL, "
    "attempts integer NOT NULL",
    "acked": "worker integer NOT NULL, key bigint NOT NULL, number bigint NOT NULL",
    "refused": "worker integer NOT NULL, key bigint NOT NULL, number bigint NOT NULL, "
    "lease_until timestamptz NOT NULL, at timestamptz NOT NULL DEFAULT statement_timestamp()",
    "swept": "worker integer NOT NULL, ready integer NOT NULL, failed integer NOT NULL, "
    "holes integer NOT NULL",
}


def create_books(conn: psycopg.Connection[Any], config: Config) -> None:
    for name, columns in BOOKS.items():
        conn.execute(sql.SQL("CREATE TABLE {} ({})").format(config.book(name), sql.SQL(columns)))


def drop_books(conn: psycopg.Connection[Any], config: Config) -> None:
    for name in BOOKS:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(config.book(name)))


def record_sweep(
    conn: psycopg.Connection[Any], config: Config, worker: int, result: RescueResult
) -> None:
    """Keep what a sweeper run did, if anything."""
    if result.ready or result.failed or result.holes:
        conn.execute(
            sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s)").format(config.book("swept")),
            (worker, result.ready, result.failed, result.holes),
        )


def body_for(key: int, rng: random.Random) -> str:
    """A payload that names its key, of varying length (rows of varying size in the slots)."""
    return f"{key}:" + "x" * rng.randrange(0, 200)


def _copy(
    conn: psycopg.Connection[Any],
    table: sql.Identifier,
    columns: str,
    rows: Sequence[tuple[Any, ...]],
) -> None:
    if not rows:
        return
    with (
        conn.cursor() as cur,
        cur.copy(sql.SQL("COPY {} ({}) FROM STDIN").format(table, sql.SQL(columns))) as copy,
    ):
        for row in rows:
            copy.write_row(row)


def push(
    config: Config,
    worker: int,
    first: int,
    count: int,
    max_batch: int,
    seed: int,
    in_transaction: bool,
) -> None:
    """Push keys ``first .. first + count - 1`` in batches of random size. ``in_transaction``:
    each batch in one transaction with its ``pushed`` rows, so a replacement of a killed pusher
    resumes exactly after the last committed key; else each push commits on its own (the
    common use), its ``pushed`` rows right after (such a pusher must not be killed)."""
    conn = psycopg.connect(config.dsn, autocommit=True)
    ex = executor_for(DIALECT, conn)
    queue = RingQueue(config.spec(), DIALECT)
    pushed = config.book("pushed")
    end = first + count
    row = conn.execute(
        sql.SQL("SELECT max(key) FROM {} WHERE key >= %s AND key < %s").format(pushed),
        (first, end),
    ).fetchone()
    key = first if row is None or row[0] is None else int(row[0]) + 1
    rng = random.Random(seed)
    while key < end:
        size = min(end - key, rng.randint(1, max_batch))
        keys = range(key, key + size)
        payloads = [{"key": k, "body": body_for(k, rng)} for k in keys]
        with conn.transaction() if in_transaction else contextlib.nullcontext():
            if size == 1:
                queue.push(ex, payloads[0])
            else:
                queue.push_many(ex, payloads)
            _copy(conn, pushed, "key, worker", [(k, worker) for k in keys])
        key += size
    conn.close()


READY = "popper ready"


class _Stop:
    """Set by SIGTERM: finish the batch in hand, then exit."""

    requested = False

    @classmethod
    def install(cls) -> None:
        def handler(signum: int, frame: object) -> None:
            cls.requested = True

        signal.signal(signal.SIGTERM, handler)


def _check(messages: list[Message]) -> None:
    for m in messages:
        key, body = m.payload["key"], m.payload["body"]
        if not isinstance(body, str) or not body.startswith(f"{key}:"):
            print(f"payload mismatch in message {m.id}: {m.payload!r}", file=sys.stderr)
            sys.exit(PAYLOAD_MISMATCH)


def pop(config: Config, worker: int, mode: DeliveryMode, batch: int, rescue_every: float) -> None:
    """Pop batches in ``mode`` until SIGTERM, keeping the books (see the module docstring);
    run the sweeper every ``rescue_every`` seconds too (0: never)."""
    _Stop.install()
    # The test waits for this line before it sends SIGTERM: a signal that arrives while the
    # interpreter is still importing would kill the popper before its handler exists.
    print(READY, flush=True)
    conn = psycopg.connect(config.dsn, autocommit=True)
    ex = executor_for(DIALECT, conn)
    queue = RingQueue(config.spec(), DIALECT)
    seen, acked, refused = config.book("seen"), config.book("acked"), config.book("refused")
    next_rescue = time.monotonic() + rescue_every
    while not _Stop.requested:
        if mode is DeliveryMode.TRANSACTIONAL:
            with conn.transaction():
                messages = queue.pop_batch(ex, batch, mode=mode)
                _check(messages)
                _copy(conn, seen, "worker, key, number, attempts",
                      [(worker, m.payload["key"], m.id, m.attempts) for m in messages])  # fmt: skip
        else:
            messages = queue.pop_batch(ex, batch, mode=mode)
            _check(messages)
            _copy(conn, seen, "worker, key, number, attempts",
                  [(worker, m.payload["key"], m.id, m.attempts) for m in messages])  # fmt: skip
        if messages and mode is DeliveryMode.AT_LEAST_ONCE:
            with conn.transaction():
                done = set(queue.ack(ex, messages, strict=False))
                ok = [m for m in messages if m.id in done]
                lost = [m for m in messages if m.id not in done]
                _copy(conn, acked, "worker, key, number",
                      [(worker, m.payload["key"], m.id) for m in ok])  # fmt: skip
                _copy(conn, refused, "worker, key, number, lease_until",
                      [(worker, m.payload["key"], m.id, m.lease_until) for m in lost])  # fmt: skip
        if rescue_every and time.monotonic() >= next_rescue:
            record_sweep(conn, config, worker, queue.rescue(ex))
            next_rescue = time.monotonic() + rescue_every
        if not messages:
            time.sleep(0.01)
    conn.close()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="ringworker")
    parser.add_argument("role", choices=["push", "pop"])
    parser.add_argument("--config", required=True, help="a Config as JSON")
    parser.add_argument("--worker", type=int, required=True)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mode", default=DeliveryMode.AT_LEAST_ONCE.value)
    parser.add_argument("--rescue-every", type=float, default=0.0)
    parser.add_argument("--autocommit", action="store_true", help="push outside transactions")
    args = parser.parse_args(argv)
    config = Config(**json.loads(args.config))
    if args.role == "push":
        push(config, args.worker, args.first, args.count, args.batch, args.seed,
             not args.autocommit)  # fmt: skip
    else:
        pop(config, args.worker, DeliveryMode.parse(args.mode), args.batch, args.rescue_every)


if __name__ == "__main__":
    main(sys.argv[1:])
