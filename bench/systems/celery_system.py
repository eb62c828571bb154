"""Celery 5.7 with a Redis broker, driven through its documented API: a no-op task with
``ignore_result=True`` taking the 300-character string, ``.delay()`` per message, and a worker
with the solo pool (one task at a time) started in the bench worker process.

Celery is measured for what users pick instead of a database queue. It does not use PostgreSQL
at all (``create`` still makes the system's empty database), and its messages do not join the
application's transactions: a task published inside a transaction that rolls back is still
delivered, and one published before the commit can run before its data is visible.

Isolation: the Redis database number and the queue name derive from the run's prefix
(``DBQUEUE_BENCH_PREFIX``), and every key kombu writes (the queue, the unacked hash, the
bindings, the broadcast channels) carries the prefix too (kombu's ``global_keyprefix``), so two
runs never share a queue even when their prefixes land on the same database number.

Celery's settings are its defaults, prefetch (``worker_prefetch_multiplier`` 4) and early
acknowledgement (``task_acks_late`` off) included, except where the worker runs in-process:
no stdout redirection (the harness reads the worker's stdout), no banner, and no mingle (the
start-up sync with other workers waits 1 s for replies, inside the measured window of the
steady-state latency, since the harness starts the worker after ``go``).

Celery is imported inside the functions and methods, so importing this module costs nothing.
"""

from __future__ import annotations

import functools
import importlib
import os
import socket
import time
import warnings
import zlib
from collections.abc import Callable
from typing import Any

from bench.systems.base import PAYLOAD, System, Tally

REDIS = "redis://127.0.0.1:6379"
TASK = "bench.celery.noop"
#: How often the worker's event loop checks whether to stop (drain: is the queue empty?).
TICK = 0.05


class _Hook:
    """What the task does in this process: count into ``tally``, and call ``handle`` (serve)."""

    tally: Tally | None = None
    handle: Callable[[str], None] | None = None


def _prefix() -> str:
    return os.environ.get("DBQUEUE_BENCH_PREFIX", "bench")


@functools.cache
def _celery() -> tuple[Any, Any, str]:
    """The app, its task and its queue name for this run's prefix (one per process)."""
    from celery import Celery  # type: ignore[import-untyped]

    prefix = _prefix()
    queue = f"{prefix}_bench"
    app = Celery("bench", broker=f"{REDIS}/{zlib.crc32(prefix.encode()) % 16}")
    app.conf.update(
        task_default_queue=queue,
        task_default_exchange=queue,
        task_default_routing_key=queue,
        broker_transport_options={"global_keyprefix": f"{prefix}:"},
        broker_connection_retry_on_startup=True,
    )

    @app.task(name=TASK, ignore_result=True)  # type: ignore[untyped-decorator]
    def noop(payload: str) -> None:
        if _Hook.handle is not None:
            _Hook.handle(payload)
        if _Hook.tally is not None:
            _Hook.tally.add(1)

    return app, noop, queue


class CeleryRedis(System):
    name = "celery-redis"
    label = "Celery 5.7 + Redis (solo pool, ignore_result)"
    # No push_batch: Celery has no batch publish (``group`` publishes one message at a time).
    # No cycle: no pop-and-acknowledge call, the worker is the only consumer.
    workloads = frozenset({"push_single", "drain", "steady"})
    # The worker takes one task at a time (prefetching up to 4, Celery's default): there is no
    # batch size to set.
    drain_batches = (1,)

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        # The worker's modules too, before a bench worker prints ready: the harness starts the
        # Celery worker after "go", and its start-up falls inside the measured window.
        for module in ("celery.apps.worker", "celery.concurrency.solo", "celery.worker.consumer"):
            importlib.import_module(module)

        self.app, self.task, self.queue = _celery()

    def install(self) -> None:
        pass  # nothing in PostgreSQL; the queue lives in Redis and needs no declaration

    def reset(self) -> None:
        with self.app.connection_for_write() as conn:
            channel = conn.default_channel
            channel.queue_purge(self.queue)
            with channel.conn_or_acquire() as client:
                client.delete(channel.unacked_key, channel.unacked_index_key)

    def depth(self) -> int:
        """Messages in the queue (every priority list) plus those delivered and unacked."""
        with self.app.connection_for_write() as conn:
            channel = conn.default_channel
            ready = channel.queue_declare(queue=self.queue).message_count
            with channel.conn_or_acquire() as client:
                return int(ready) + int(client.hlen(channel.unacked_key))

    def push_single(self, n: int) -> None:
        delay = self.task.delay
        for _ in range(n):
            delay(PAYLOAD)

    def fill(self, n: int) -> None:
        """The drain's backlog, published in pipelines of 1,000 through kombu 5.7's
        ``Producer.batch()`` (each message still made by ``apply_async``). Not a push_batch
        figure: that is Celery's messaging library, not a Celery API, and it only halves the
        round trips (the exchange's bindings are still read from Redis once per message)."""
        apply = self.task.apply_async
        with self.app.producer_or_acquire() as producer:
            for start in range(0, n, 1000):
                with producer.batch(max_size=1000):
                    for _ in range(min(1000, n - start)):
                        apply((PAYLOAD,), producer=producer)

    def push_payload(self, payload: str) -> None:
        self.task.delay(payload)

    # -- consumer side ---------------------------------------------------------------------------

    def _work(self, tally: Tally, stop: Callable[[], bool]) -> None:
        """Run a solo-pool worker in this process until ``stop()`` says so; ``stop`` runs in the
        worker's event loop (between tasks) every TICK seconds, and a warm shutdown follows."""
        from celery import signals
        from celery.exceptions import SecurityWarning  # type: ignore[import-untyped]
        from celery.platforms import EX_OK  # type: ignore[import-untyped]
        from celery.worker import state  # type: ignore[import-untyped]

        # Celery warns when it runs as root (CI containers do); the warning is all it does.
        warnings.filterwarnings("ignore", category=SecurityWarning)

        def tick() -> None:
            if stop():
                state.should_stop = EX_OK  # the event loop raises WorkerShutdown on its next turn

        def ready(sender: Any, **kwargs: Any) -> None:
            sender.timer.call_repeatedly(TICK, tick)

        state.should_stop = None
        _Hook.tally = tally
        signals.worker_ready.connect(ready, weak=False, dispatch_uid="bench-celery")
        try:
            self.app.Worker(
                hostname=f"bench{os.getpid()}@{socket.gethostname()}",
                pool="solo",
                concurrency=1,
                loglevel="WARNING",
                quiet=True,
                redirect_stdouts=False,
                without_mingle=True,
            ).start()
        finally:
            signals.worker_ready.disconnect(dispatch_uid="bench-celery")
            _Hook.tally = None

    def drain(self, batch: int) -> Tally:
        """Stop once the worker has been idle for two ticks, holds no request, and Redis has
        nothing left in the queue or unacked: every message is then counted (in the task),
        and the harness checks the total and the depth."""
        from celery.worker import state

        tally, seen, idle = Tally(), [-1], [0]

        def done() -> bool:
            if tally.count != seen[0]:
                seen[0], idle[0] = tally.count, 0
                return False
            idle[0] += 1
            if idle[0] < 2 or state.active_requests or state.reserved_requests:
                return False
            return self.depth() == 0

        self._work(tally, done)
        return tally

    def serve(self, batch: int, seconds: float, handle: Callable[[str], None]) -> Tally:
        tally = Tally()
        deadline = time.perf_counter() + seconds
        _Hook.handle = handle
        try:
            self._work(tally, lambda: time.perf_counter() >= deadline)
        finally:
            _Hook.handle = None
        return tally
