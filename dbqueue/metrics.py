"""Prometheus metrics (the ``metrics`` extra, ``prometheus_client``).

Two collectors, read at scrape time:

- :class:`DepthCollector`: each queue's items by state, the age of its oldest ready item and
  how many items were ever pushed, read from the database (pushes happen in web processes a
  worker never sees, so only the database can count them). Cached for :data:`CACHE_FOR`
  seconds, so frequent scrapes, or several Prometheus servers, do not each run a query.
- :class:`WorkerCollector`: what one worker process did per queue since it started (its
  :class:`~dbqueue.worker.tallies.Tallies`): items handled, failed attempts, handler
  durations, expired leases found and rescued.

A worker serves both on its own port (:func:`serve_worker`, ``Worker(metrics_port=...)``,
``--metrics-port``); Django's ``dbqueue_django.views.metrics`` serves the depth collector from
a web process. Importing this module does not need ``prometheus_client``; using it does
(:func:`require_prometheus`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

from dbqueue.errors import MetricsUnavailable
from dbqueue.wakeup import quietly

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import CollectorRegistry

    from dbqueue.worker.consumer import Consumer
    from dbqueue.worker.tallies import Tallies

log = logging.getLogger("dbqueue.metrics")

#: Seconds a database reading of the queues serves scrapes before it is read again.
CACHE_FOR = 5.0
#: What to do when the extra is missing: one line, naming it.
EXTRA_MISSING = "metrics need the prometheus_client package: pip install 'dbqueue[metrics]'"
#: Where a worker listens for scrapes unless told otherwise: every interface, since Prometheus
#: scrapes it from another host or container (close the port with a network policy instead).
METRICS_HOST = "0.0.0.0"  # noqa: S104
#: The ``state`` label values of ``dbqueue_depth``, in the order they are exposed. ``spilled``
#: is a ring's only (messages in its overflow, counted in ``ready`` too).
DEPTH_STATES = ("ready", "scheduled", "leased", "done", "failed", "cancelled")


def require_prometheus() -> None:
    """Raise :class:`~dbqueue.errors.MetricsUnavailable` unless ``prometheus_client`` is
    installed."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise MetricsUnavailable(EXTRA_MISSING) from None


class QueueDepth(NamedTuple):
    """One queue's reading: its ``stats()`` and ``pushed()``, None where it could not be read
    (the database is away, the tables do not exist)."""

    queue: str
    stats: Mapping[str, Any] | None
    pushed: int | None


@runtime_checkable
class Measured(Protocol):
    """A queue a metrics scrape can read: the worker's queues
    (:class:`~dbqueue.worker_queue.FrontWorkerQueue`) are."""

    @property
    def name(self) -> str:
        """The ``queue`` label."""

    def stats(self) -> Mapping[str, Any]:
        """Counts per state and ``oldest_ready_age`` (see ``FrontQueue.stats``)."""

    def pushed(self) -> int:
        """How many items were ever pushed (see ``FrontQueue.pushed``)."""


def read_depth(
    name: str, stats: Callable[[], Mapping[str, Any]], pushed: Callable[[], int]
) -> QueueDepth:
    """One queue's reading; a failure is logged and leaves the part that failed None."""
    try:
        read_stats: Mapping[str, Any] | None = stats()
    except Exception as exc:
        log.warning("metrics: cannot read the stats of queue %s (%s)", name, exc)
        return QueueDepth(name, None, None)
    try:
        read_pushed: int | None = pushed()
    except Exception as exc:
        log.warning("metrics: cannot read how many items queue %s had (%s)", name, exc)
        read_pushed = None
    return QueueDepth(name, read_stats, read_pushed)


class DepthCollector:
    """Gauges of each queue's depth from the database (see the module). ``read`` returns a
    reading per queue; it runs at most once per ``cache_for`` seconds, whatever the number of
    scrapes, and one scrape at a time."""

    def __init__(
        self, read: Callable[[], Sequence[QueueDepth]], *, cache_for: float = CACHE_FOR
    ) -> None:
        self._read = read
        self.cache_for = cache_for
        self._lock = threading.Lock()
        self._readings: Sequence[QueueDepth] = ()
        self._read_at: float | None = None

    def readings(self) -> Sequence[QueueDepth]:
        """The queues' readings, read again if the last one is older than ``cache_for``."""
        with self._lock:
            now = time.monotonic()
            if self._read_at is None or now - self._read_at >= self.cache_for:
                self._readings = self._read()
                self._read_at = now
            return self._readings

    def describe(self) -> Iterator[Metric]:
        # Without it, registering the collector would run a scrape (a query) to learn names.
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        yield from self._families(self.readings())

    @staticmethod
    def _families(readings: Sequence[QueueDepth] = ()) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        up = GaugeMetricFamily(
            "dbqueue_stats_up",
            "1 if the queue's stats could be read from the database at the last scrape, else 0",
            labels=["queue"],
        )
        depth = GaugeMetricFamily(
            "dbqueue_depth",
            "Items per state (ready: due now, scheduled: due later; a ring's spilled messages "
            "are counted in ready too)",
            labels=["queue", "state"],
        )
        expired = GaugeMetricFamily(
            "dbqueue_leased_expired",
            "Leased items whose lease has expired and no rescue has taken back yet",
            labels=["queue"],
        )
        age = GaugeMetricFamily(
            "dbqueue_oldest_ready_age_seconds",
            "How long the oldest ready item has waited (0: none is ready)",
            labels=["queue"],
        )
        pushed = CounterMetricFamily(
            "dbqueue_pushed",
            "Items ever pushed, from the database (a ring: numbers its push counter handed out)",
            labels=["queue"],
        )
        slots = GaugeMetricFamily(
            "dbqueue_ring_slots", "A ring's slots (its capacity)", labels=["queue"]
        )
        in_slots = GaugeMetricFamily(
            "dbqueue_ring_slots_used",
            "A ring's slots holding a message (ready or leased): at its slots, pushes spill, "
            "wait or fail (the ring's when_full)",
            labels=["queue"],
        )
        for reading in readings:
            q = reading.queue
            stats = reading.stats
            up.add_metric([q], 0 if stats is None else 1)
            if stats is not None:
                for state in DEPTH_STATES:
                    depth.add_metric([q, state], stats[state])
                if stats.get("spilled") is not None:
                    depth.add_metric([q, "spilled"], stats["spilled"])
                expired.add_metric([q], stats["expired"])
                if stats.get("capacity") is not None:
                    slots.add_metric([q], stats["capacity"])
                    in_slots.add_metric([q], stats["in_slots"])
                oldest = stats["oldest_ready_age"]
                age.add_metric([q], 0.0 if oldest is None else oldest.total_seconds())
            if reading.pushed is not None:
                pushed.add_metric([q], reading.pushed)
        yield from (up, depth, expired, age, pushed, slots, in_slots)


class WorkerCollector:
    """Counters and the handler duration histogram of one worker process, per queue."""

    def __init__(self, tallies: Tallies) -> None:
        self.tallies = tallies

    def describe(self) -> Iterator[Metric]:
        yield from self._families({})

    def collect(self) -> Iterator[Metric]:
        yield from self._families(self.tallies.snapshot())

    @staticmethod
    def _families(snapshot: Mapping[str, Any]) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

        handled = CounterMetricFamily(
            "dbqueue_handled", "Items this worker's handlers handled successfully", labels=["queue"]
        )
        failed = CounterMetricFamily(
            "dbqueue_failed",
            "Failed attempts in this worker, by what became of the item: retry (tried again "
            "after its back-off) or failed (for good)",
            labels=["queue", "outcome"],
        )
        duration = HistogramMetricFamily(
            "dbqueue_handler_duration_seconds",
            "Handler calls in this worker: one per item, or one per batch for a batch handler",
            labels=["queue"],
        )
        expiries = CounterMetricFamily(
            "dbqueue_lease_expiries",
            "Expired leases this worker's rescues found (a worker died or overran)",
            labels=["queue"],
        )
        rescued = CounterMetricFamily(
            "dbqueue_rescued",
            "Items with an expired lease this worker's rescues made ready again",
            labels=["queue"],
        )
        lost = CounterMetricFamily(
            "dbqueue_lost_leases",
            "Items whose lease had expired before this worker settled them",
            labels=["queue"],
        )
        for q, tally in snapshot.items():
            handled.add_metric([q], tally.handled)
            failed.add_metric([q, "retry"], tally.retried)
            failed.add_metric([q, "failed"], tally.failed)
            duration.add_metric(
                [q], buckets=tally.durations.cumulative(), sum_value=tally.durations.total
            )
            expiries.add_metric([q], tally.expired_leases)
            rescued.add_metric([q], tally.rescued)
            lost.add_metric([q], tally.lost_leases)
        yield from (handled, failed, duration, expiries, rescued, lost)


class ThreadReader:
    """Reads queues on a thread of its own, so a scrape (each on a new thread of the HTTP
    server) reuses one connection per queue, the worker's convention: a queue's operations run
    on the calling thread's connection. A failed read drops that connection; the next scrape
    reconnects."""

    def __init__(self, queues: Sequence[Measured]) -> None:
        self.queues = list(queues)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dbqueue-metrics")

    def __call__(self) -> list[QueueDepth]:
        return self._thread.submit(self._read).result()

    def _read(self) -> list[QueueDepth]:
        readings = []
        for q in self.queues:
            reading = read_depth(q.name, q.stats, q.pushed)
            if reading.stats is None or reading.pushed is None:
                quietly(getattr(q, "disconnect", lambda: None))
            readings.append(reading)
        return readings

    def close(self) -> None:
        """Close the connections the reads opened, and the thread."""

        def disconnect() -> None:
            for q in self.queues:
                quietly(getattr(q, "disconnect", lambda: None))

        self._thread.submit(disconnect).result()
        self._thread.shutdown()


@dataclass
class MetricsServer:
    """A worker's metrics endpoint: ``http://<host>:<port>/metrics`` (any path answers)."""

    host: str
    port: int
    _close: Callable[[], None]

    def close(self) -> None:
        """Stop serving, and close the connections the scrapes used."""
        self._close()


def worker_registry(tallies: Tallies, reader: ThreadReader) -> CollectorRegistry:
    """A registry of a worker's collectors (its ``tallies``, the depths ``reader`` reads), and
    the process's own (CPU, memory, files)."""
    from prometheus_client import (
        CollectorRegistry,
        GCCollector,
        PlatformCollector,
        ProcessCollector,
    )

    registry = CollectorRegistry(auto_describe=True)
    registry.register(DepthCollector(reader))
    registry.register(WorkerCollector(tallies))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


def serve_worker(
    tallies: Tallies, consumers: Sequence[Consumer], port: int, host: str = METRICS_HOST
) -> MetricsServer:
    """Serve the metrics of a worker (its ``tallies``, the depths of its ``consumers``'
    queues) over HTTP on ``port`` (0: a free port, see the result's
    ``port``) until the result is closed. Raises :class:`~dbqueue.errors.MetricsUnavailable`
    without the extra or when the port cannot be listened on."""
    require_prometheus()
    from prometheus_client import start_http_server

    tallies.start(c.queue.name for c in consumers)
    queues = [c.queue for c in consumers if isinstance(c.queue, Measured)]
    reader = ThreadReader(queues)
    registry = worker_registry(tallies, reader)
    try:
        httpd, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        reader.close()
        raise MetricsUnavailable(
            f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}"
        ) from None

    def close() -> None:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
        reader.close()

    return MetricsServer(host, int(httpd.server_port), close)
