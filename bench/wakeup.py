"""Wake-ups: what NOTIFY costs a pusher, and how fast an idle worker picks up a lone message.

- ``notify_cost``: single pushes per second through the core with NOTIFY off, at every push,
  and coalesced (at most one per ``notify_interval``, the default), while a worker LISTENs.
  NOTIFY takes a database-wide lock at commit; this is the figure the default is chosen by.
- ``pickup``: a worker idle past its linger (so only a notification, or its poll, can wake it)
  gets lone messages pushed one at a time; the latency from the push's commit to the handler.
"""

from __future__ import annotations

import datetime as dt
import statistics
import threading
import time
from typing import Any

import psycopg

from bench.env import BenchEnv
from bench.measure import Measurement
from bench.systems.base import PAYLOAD
from dbqueue import Field, FieldKind, QueueOptions, QueueSpec, SplitQueue, get_dialect
from dbqueue.drivers.psycopg import PsycopgExecutor
from dbqueue.schema import create_statements
from dbqueue.wakeup import PollPolicy
from dbqueue.worker import Consumer, Worker
from dbqueue.worker_queue import ExecutorQueue

SYSTEM = "dbqueue-worker"
TABLE = "bench_wakeup"
#: notify_interval values compared, by their label in the report.
NOTIFY_MODES: dict[str, dt.timedelta | None] = {
    "off (polling only)": None,
    "every push": dt.timedelta(0),
    "coalesced, 100 ms (default)": QueueOptions().notify_interval,
}


def _queue(notify: dt.timedelta | None) -> SplitQueue:
    options = QueueOptions(notify_interval=notify)
    spec = QueueSpec(TABLE, (Field("payload", FieldKind.TEXT),), options)
    return SplitQueue(spec, get_dialect("postgresql"))


def _listen(dsn: str, channel: str, stop: threading.Event) -> threading.Thread:
    """A connection that LISTENs and drains notifications, as an idle worker's would."""

    def run() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
            while not stop.is_set():
                for _ in conn.notifies(timeout=0.2):
                    pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    time.sleep(0.3)
    return thread


def notify_cost(env: BenchEnv, dsn: str) -> list[Measurement]:
    n = env.size(5_000, 500)
    out = []
    for label, interval in NOTIFY_MODES.items():
        queue = _queue(interval)
        stop = threading.Event()
        listener = _listen(dsn, queue.spec.channel, stop)
        runs = []
        with psycopg.connect(dsn, autocommit=True) as conn:
            ex = PsycopgExecutor(conn)
            for _ in range(env.repeat):
                conn.execute(f"TRUNCATE {TABLE}, {TABLE}_meta")
                start = time.perf_counter()
                for _ in range(n):
                    queue.push(ex, {"payload": PAYLOAD})
                runs.append(n / (time.perf_counter() - start))
        stop.set()
        listener.join()
        out.append(Measurement(SYSTEM, "notify_cost", {"notify": label}, runs,
                               extra={"messages": n}))  # fmt: skip
    return out


def pickup(env: BenchEnv, dsn: str) -> list[Measurement]:
    """Latency of lone messages to an idle worker, with notifications and with polling only."""
    modes = (("LISTEN/NOTIFY", QueueOptions().notify_interval), ("polling", None))
    return [_pickups(env, dsn, label, interval) for label, interval in modes]


def _pickups(env: BenchEnv, dsn: str, label: str, interval: dt.timedelta | None) -> Measurement:
    queue = _queue(interval)
    latencies: list[float] = []
    arrived = threading.Semaphore(0)

    def handle(message: Any) -> None:
        # The payload is the push's start on this process's perf_counter clock.
        latencies.append(time.perf_counter() - float(message.payload["payload"]))
        arrived.release()

    binding = ExecutorQueue(
        queue,
        lambda: PsycopgExecutor(psycopg.connect(dsn, autocommit=True)),
        listen=lambda: psycopg.connect(dsn),
    )
    poll = PollPolicy(linger=0.2)  # idle soon: the pickups measure the idle path
    worker = Worker([Consumer(binding, handle)], poll=poll)
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Emptied before the worker starts: TRUNCATE against its pops would deadlock.
        conn.execute(f"TRUNCATE {TABLE}, {TABLE}_meta")
        thread = threading.Thread(target=worker.run, kwargs={"handle_signals": False})
        thread.start()
        try:
            ex = PsycopgExecutor(conn)
            time.sleep(1.0)
            for _ in range(env.size(50, 10)):
                time.sleep(0.5)  # past the linger: the worker is idle again
                queue.push(ex, {"payload": repr(time.perf_counter())})
                arrived.acquire(timeout=30)
        finally:
            worker.stop()
            thread.join()
    ms = sorted(x * 1000 for x in latencies)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    extra = {"messages": len(ms), "p99_ms": round(p99, 1), "max_ms": round(ms[-1], 1)}
    return Measurement(SYSTEM, "pickup", {"wake-up": label}, [statistics.median(ms)],
                       unit="ms", extra=extra)  # fmt: skip


def measure(env: BenchEnv) -> list[Measurement]:
    """Both wake-up figures, on a database of their own."""
    dsn = env.database("wakeup")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in create_statements(_queue(None).spec, get_dialect("postgresql")):
            conn.execute(statement)
    try:
        return notify_cost(env, dsn) + pickup(env, dsn)
    finally:
        env.drop("wakeup")
