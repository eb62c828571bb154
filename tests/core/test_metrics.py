"""Prometheus metrics on real databases: the depth collector's gauges and the pushed counter
read from the database, a worker's counters and histogram, its ``metrics_port`` served over
HTTP, and the one-line error without the ``metrics`` extra."""

from __future__ import annotations

import sys
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from dbqueue import QueueOptions
from dbqueue.errors import InvalidArgument, MetricsUnavailable
from dbqueue.metrics import (
    EXTRA_MISSING,
    DepthCollector,
    ThreadReader,
    WorkerCollector,
    read_depth,
)
from dbqueue.spec import DEFAULT_PUSH_TIMEOUT
from dbqueue.worker import Consumer, Worker
from dbqueue.worker.tallies import DURATION_BUCKETS, Tallies
from tests.core.ringbed import BACKENDS, ring_bed
from tests.core.test_worker import (
    DATABASES,
    NO_WAIT,
    Setup,
    make_setup,
    run_in_thread,
    wait_until,
)


@pytest.fixture(params=DATABASES)
def db(request: pytest.FixtureRequest, table_name: str) -> Iterator[Setup]:
    options = QueueOptions(max_attempts=2, backoff=NO_WAIT)
    setup = make_setup(request, request.param, table_name, options)
    yield setup
    setup.ex.close()  # type: ignore[attr-defined]


def fail_odd(message: object) -> None:
    if message.payload["n"] % 2:  # type: ignore[attr-defined]
        raise ValueError("odd")


def registry_of(*collectors: object) -> CollectorRegistry:
    registry = CollectorRegistry()
    for collector in collectors:
        registry.register(collector)  # type: ignore[arg-type]
    return registry


def test_the_depth_gauges_and_the_pushed_counter_come_from_the_database(db: Setup) -> None:
    queue = db.binding()
    reader = ThreadReader([queue])
    registry = registry_of(DepthCollector(reader, cache_for=0))
    try:
        assert registry.get_sample_value("dbqueue_pushed_total", {"queue": queue.name}) == 0
        db.push(5)
        value = registry.get_sample_value
        assert value("dbqueue_stats_up", {"queue": queue.name}) == 1
        assert value("dbqueue_depth", {"queue": queue.name, "state": "ready"}) == 5
        assert value("dbqueue_depth", {"queue": queue.name, "state": "failed"}) == 0
        assert value("dbqueue_depth", {"queue": queue.name, "state": "cancelled"}) == 0
        assert value("dbqueue_depth", {"queue": queue.name, "state": "spilled"}) is None
        assert value("dbqueue_oldest_ready_age_seconds", {"queue": queue.name}) >= 0  # type: ignore[operator]
        assert value("dbqueue_pushed_total", {"queue": queue.name}) == 5
        Worker([Consumer(queue, fail_odd)], burst=True).run(handle_signals=False)
        # Acked items are gone from the tables; the pushed counter does not go down.
        assert value("dbqueue_depth", {"queue": queue.name, "state": "ready"}) == 0
        assert value("dbqueue_depth", {"queue": queue.name, "state": "failed"}) == 2
        assert value("dbqueue_oldest_ready_age_seconds", {"queue": queue.name}) == 0
        assert value("dbqueue_pushed_total", {"queue": queue.name}) == 5
    finally:
        reader.close()


def test_a_reading_serves_scrapes_until_it_is_too_old(db: Setup) -> None:
    queue = db.binding()
    reader = ThreadReader([queue])
    collector = DepthCollector(reader, cache_for=3600)
    registry = registry_of(collector)
    try:
        labels = {"queue": queue.name, "state": "ready"}
        assert registry.get_sample_value("dbqueue_depth", labels) == 0
        db.push(2)
        assert registry.get_sample_value("dbqueue_depth", labels) == 0  # cached
        collector.cache_for = 0
        assert registry.get_sample_value("dbqueue_depth", labels) == 2
    finally:
        reader.close()


def test_a_queue_that_cannot_be_read_is_down(db: Setup) -> None:
    queue = db.binding()
    reader = ThreadReader([queue])
    registry = registry_of(DepthCollector(reader, cache_for=0))
    try:
        db.ex.execute(f'DROP TABLE "{db.queue.spec.meta_table}"', {})
        assert registry.get_sample_value("dbqueue_stats_up", {"queue": queue.name}) == 0
        assert (
            registry.get_sample_value("dbqueue_depth", {"queue": queue.name, "state": "ready"})
            is None
        )
    finally:
        reader.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_ring_counts_its_pushes_and_its_spilled_messages(
    backend: str, request: pytest.FixtureRequest, table_name: str
) -> None:
    with ring_bed(
        backend, request, table_name, when_full="spill", push_timeout=DEFAULT_PUSH_TIMEOUT
    ) as bed:
        assert bed.queue.pushed(bed.ex) == 0
        bed.queue.push_many(bed.ex, [{"n": i} for i in range(6)])  # capacity 4: 2 spill
        assert bed.queue.stats(bed.ex).as_dict()["spilled"] == 2
        # In the ring: 4 numbers. PostgreSQL numbers the spilled ones as they spill too,
        # SQLite once they move into the ring: the counter follows the traffic.
        pushed = bed.queue.pushed(bed.ex)
        assert pushed == (6 if backend == "postgresql" else 4)
        bed.queue.push(bed.ex, {"n": 7})  # spills too: the ring is still full
        assert bed.queue.pushed(bed.ex) == pushed + (backend == "postgresql")
        # Full: every slot used, what an alert before spilling watches.
        reading = read_depth(
            table_name, lambda: bed.queue.stats(bed.ex).report(), lambda: bed.queue.pushed(bed.ex)
        )
        registry = registry_of(DepthCollector(lambda: [reading]))
        assert registry.get_sample_value("dbqueue_ring_slots", {"queue": table_name}) == 4
        assert registry.get_sample_value("dbqueue_ring_slots_used", {"queue": table_name}) == 4


def test_the_worker_counts_outcomes_and_handler_calls(db: Setup) -> None:
    db.push(4)
    worker = Worker([Consumer(db.binding(), fail_odd)], burst=True)
    worker.run(handle_signals=False)
    name = db.binding().name
    registry = registry_of(WorkerCollector(worker.tallies))
    value = registry.get_sample_value
    assert value("dbqueue_handled_total", {"queue": name}) == 2
    # Two odd items, max_attempts=2: each failed once to be retried, then for good.
    assert value("dbqueue_failed_total", {"queue": name, "outcome": "retry"}) == 2
    assert value("dbqueue_failed_total", {"queue": name, "outcome": "failed"}) == 2
    assert value("dbqueue_handler_duration_seconds_count", {"queue": name}) == 6
    assert value("dbqueue_handler_duration_seconds_bucket", {"queue": name, "le": "+Inf"}) == 6
    assert value("dbqueue_lease_expiries_total", {"queue": name}) == 0


def test_rescues_count_the_expired_leases_they_find(db: Setup) -> None:
    db.push(2)
    queue = db.binding()
    db.queue.pop_batch(db.ex, 2)
    db.ex.execute(
        f"UPDATE \"{db.queue.spec.meta_table}\" SET lease_until = lease_until - INTERVAL '1 hour'"
        if db.kind == "pg"
        else f"UPDATE \"{db.queue.spec.meta_table}\" SET lease_until = '2000-01-01 00:00:00'",
        {},
    )
    worker = Worker([Consumer(queue, lambda m: None)], burst=True)
    worker._rescue(queue)
    tally = worker.tallies.snapshot()[queue.name]
    assert (tally.expired_leases, tally.rescued) == (2, 2)


def test_durations_fall_into_cumulative_buckets() -> None:
    tallies = Tallies()
    tallies.start(["q"])
    assert tallies.snapshot()["q"].durations.count == 0
    tallies.handled("q", ok=3, retried=0, failed=0, durations=[0.0005, 0.002, 1000.0])
    durations = tallies.snapshot()["q"].durations
    buckets = dict(durations.cumulative())
    assert buckets[repr(DURATION_BUCKETS[0])] == 1
    assert buckets[repr(DURATION_BUCKETS[1])] == 2
    assert buckets[repr(DURATION_BUCKETS[-1])] == 2
    assert buckets["+Inf"] == 3
    assert durations.total == pytest.approx(1000.0025)


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            samples[f"{s.name}{{{labels}}}"] = s.value
    return samples


def test_a_worker_serves_its_metrics_over_http(db: Setup) -> None:
    db.push(4)
    queue = db.binding()
    worker = Worker(
        [Consumer(queue, fail_odd)], metrics_port=0, metrics_host="127.0.0.1", summary_every=0
    )
    finish = run_in_thread(worker)
    try:
        wait_until(lambda: worker.metrics is not None)
        assert worker.metrics is not None
        port = worker.metrics.port
        handled = f"dbqueue_handled_total{{queue={queue.name}}}"
        wait_until(lambda: scrape(port).get(handled) == 2)
        samples = scrape(port)
        assert samples[f"dbqueue_pushed_total{{queue={queue.name}}}"] == 4
        assert samples[f"dbqueue_stats_up{{queue={queue.name}}}"] == 1
        assert f"dbqueue_handler_duration_seconds_count{{queue={queue.name}}}" in samples
        assert any(name.startswith("process_") for name in samples)  # the process's own
    finally:
        finish()
    assert worker.metrics is None  # closed with the worker


def test_a_port_in_use_is_a_one_line_error(db: Setup) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = Worker(
            [Consumer(db.binding(), fail_odd)],
            burst=True,
            metrics_port=port,
            metrics_host="127.0.0.1",
        )
        with pytest.raises(
            MetricsUnavailable, match=rf"^cannot serve metrics on 127\.0\.0\.1:{port}: "
        ):
            worker.run(handle_signals=False)


@pytest.mark.parametrize("port", [-1, 65536, True, "9100"])
def test_a_metrics_port_must_be_a_port(db: Setup, port: object) -> None:
    with pytest.raises(InvalidArgument, match="metrics_port"):
        Worker([Consumer(db.binding(), fail_odd)], metrics_port=port)  # type: ignore[arg-type]


def test_without_the_extra_a_metrics_port_is_a_one_line_error(
    db: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import raises ImportError
    with pytest.raises(MetricsUnavailable) as raised:
        Worker([Consumer(db.binding(), fail_odd)], metrics_port=9100)
    assert str(raised.value) == EXTRA_MISSING
    assert "dbqueue[metrics]" in EXTRA_MISSING and "\n" not in EXTRA_MISSING
    Worker([Consumer(db.binding(), fail_odd)])  # without a port, nothing needs it
