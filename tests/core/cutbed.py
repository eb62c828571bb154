"""A queue whose worker reaches the test PostgreSQL through a proxy the test kills
(:class:`tests.proxy.TcpProxy`): the database goes away under a worker with items in hand. The
test's own connection does not go through the proxy, so it sees what the worker left."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import psycopg

from dbqueue import Field, FieldKind, QueueOptions, QueueSpec, SplitQueue, get_dialect
from dbqueue.drivers.psycopg import PsycopgExecutor
from dbqueue.message import State
from dbqueue.schema import create_statements
from dbqueue.worker import Worker
from dbqueue.worker_queue import ExecutorQueue
from tests.proxy import TcpProxy

DIALECT = get_dialect("postgresql")
#: Seconds to wait for what normally takes a moment (a hang guard, not a threshold).
PATIENCE = 30.0


class Cut:
    """A split queue of items with one field (``n``) on the test server, its worker's
    connections through ``proxy``."""

    def __init__(self, dsn: str, table: str, proxy: TcpProxy, lease: timedelta) -> None:
        spec = QueueSpec(table, (Field("n", FieldKind.INTEGER),), QueueOptions(lease=lease))
        self.queue = SplitQueue(spec, DIALECT)
        self.ex = PsycopgExecutor(psycopg.connect(dsn, autocommit=True))
        for statement in create_statements(spec, DIALECT):
            self.ex.execute(statement, {})
        proxied = proxy.dsn(dsn)
        self.binding = ExecutorQueue(
            self.queue, lambda: PsycopgExecutor(psycopg.connect(proxied, autocommit=True))
        )
        self.proxy = proxy

    def push(self, count: int) -> None:
        self.queue.push_many(self.ex, [{"n": i} for i in range(count)])

    def states(self) -> Counter[State]:
        rows = self.ex.execute(f'SELECT state FROM "{self.queue.spec.meta_table}"', {})
        return Counter(State(r[0]) for r in rows)


@contextmanager
def cut_queue(dsn: str, table: str, lease: timedelta = timedelta(seconds=3)) -> Iterator[Cut]:
    with TcpProxy.to_dsn(dsn) as proxy:
        cut = Cut(dsn, table, proxy, lease)
        try:
            yield cut
        finally:
            cut.ex.close()  # type: ignore[attr-defined]


def run_in_thread(worker: Worker) -> tuple[threading.Thread, list[BaseException]]:
    """Start ``worker.run()`` in a thread of its own (no signals); the thread, and a list
    that receives what it raised."""
    raised: list[BaseException] = []

    def target() -> None:
        try:
            worker.run(handle_signals=False)
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, raised


def join_worker_threads() -> None:
    """Wait for the threads of the workers of the test to end (a worker that gave up leaves
    a thread in a handler behind)."""
    for thread in threading.enumerate():
        if thread.name.startswith("dbqueue-"):
            thread.join(PATIENCE)
            assert not thread.is_alive(), f"{thread.name} did not end"
