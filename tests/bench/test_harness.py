"""Smoke runs of the benchmark harness on tiny sizes, so that it cannot rot. They assert that
a run completes and writes its report, never a speed: figures belong in bench/results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.pg import server_dsn, worker_id

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.postgresql, pytest.mark.django]
OURS = (
    "thin", "naive", "dbqueue-core", "dbqueue-core-amo", "dbqueue-django", "dbqueue-ring",
    "dbqueue-sa",
)  # fmt: skip
#: A ring declared by a Django model has one capacity: it runs only the workloads that fit.
FIXED = ("dbqueue-ring-django",)
#: The systems of the pairs workload, whose figures the report sets side by side.
PAIRED = ("thin", "naive", "dbqueue-core", "dbqueue-ring", "dbqueue-django", "dbqueue-sa", *FIXED)
PEERS = ("pgqueuer", "procrastinate", "django-tasks-db", "celery-redis")
#: Other ways through the same queues: popped by the worker's loop (ack_pop), at most once.
VARIANTS = ("dbqueue-core-loop", "dbqueue-ring-loop", "dbqueue-ring-amo")
#: Each layout's own statements through the executor alone: the Python floor.
FLOOR = ("sql-ring", "sql-split")
#: SQLAlchemy's asyncio API, on psycopg and on asyncpg; Django's async twins.
ASYNC = ("dbqueue-sa-async", "dbqueue-sa-asyncpg", "dbqueue-django-async")
#: pgbench running the pairs' SQL (bench/ring_pgbench.py); the minimal ring, one client only.
PGBENCH_PAIRED = ("pgbench-ring", "pgbench-ring-amo", "pgbench-split", "pgbench-naive")


def _drop_databases(prefix: str) -> None:
    """Drop the run's databases: a server named by DBQUEUE_TEST_DSN outlives the test run."""
    with psycopg.connect(server_dsn(), autocommit=True) as conn:
        names = conn.execute(
            "SELECT datname FROM pg_database WHERE left(datname, length(%s)) = %s",
            (prefix, prefix),
        ).fetchall()
        for (name,) in names:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def _bench(out: Path, *args: str, module: str = "bench") -> dict[str, Any]:
    """Run ``python -m <module> --repeat 1 ARGS`` into ``out``; return its results.json, whose
    figures are all positive."""
    data = _run(out, *args, module=module)
    # Dead tuples may be 0 (autovacuum got there first), and so may the share of HOT updates
    # (the split queue's updates change an indexed column); every other figure is positive.
    empty = [
        (r["system"], r["workload"], r["params"])
        for r in data["results"]
        if not r["median"] > 0 and r["workload"] not in ("bloat_dead_tuples", "bloat_hot_updates")
    ]
    assert not empty, empty
    return data


def _run(out: Path, *args: str, module: str) -> dict[str, Any]:
    """Run ``python -m <module> --repeat 1 ARGS`` into ``out``; return its results.json."""
    prefix = f"smoke_{worker_id()}_{os.getpid()}_{out.name}"
    env = {**os.environ, "DBQUEUE_BENCH_DSN": server_dsn(), "DBQUEUE_BENCH_PREFIX": prefix}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    cmd = [sys.executable, "-m", module, "--repeat", "1", "--out", str(out), *args]
    try:
        result = subprocess.run(
            cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False
        )
    finally:
        _drop_databases(f"{prefix}_")
    assert result.returncode == 0, result.stdout + result.stderr
    data: dict[str, Any] = json.loads((out / "results.json").read_text())
    return data


@pytest.mark.soak  # every system, peers included: eight minutes on 2 cores (make test-soak)
def test_every_system_through_the_quick_workloads(tmp_path: Path) -> None:
    systems = ",".join(OURS + FIXED + PEERS + VARIANTS + FLOOR + ASYNC)
    quick = ("--quick", "--scale", "0.002", "--pairs", "2", "--pair-seconds", "0.3")
    data = _bench(tmp_path / "all", *quick, "--systems", systems)
    seen = {(r["system"], r["workload"]) for r in data["results"]}
    for system in OURS + PEERS:
        for workload in ("push_single", "drain", "steady_throughput", "latency_p99"):
            assert (system, workload) in seen
    for system in OURS + FIXED:
        for workload in ("cycle", "bloat_size", "bloat_dead_tuples"):
            assert (system, workload) in seen
    for system in OURS:
        assert (system, "push_batch") in seen
    for system in FIXED:
        assert (system, "steady_throughput") in seen
        assert (system, "push_batch") not in seen
    assert ("pgbench", "push_single") in seen
    for system in VARIANTS:
        assert {(system, "cycle"), (system, "pairs")} <= seen
    for system in FLOOR:
        assert {(system, w) for w in ("cycle", "pairs", "bloat_churn_rate")} <= seen
    for system in ASYNC:
        assert {(system, w) for w in ("push_single", "push_batch", "drain", "cycle")} <= seen
    for system in ("dbqueue-ring", "dbqueue-ring-loop"):
        stuck = {r["params"]["stuck"] for r in data["results"] if r["workload"] == "stuck"}
        assert (system, "stuck") in seen and stuck == {"none", "leased", "retrying", "claimed"}
    pairs = {
        (r["system"], r["params"]["batch"], r["params"]["sync_commit"])
        for r in data["results"]
        if r["workload"] == "pairs" and r["system"] != "pgbench-kejser"
    }
    paired = PAIRED + VARIANTS + FLOOR + ASYNC + PGBENCH_PAIRED
    assert pairs == {(s, b, sync) for s in paired for b in (1, 100) for sync in ("on", "off")}
    assert ("pgbench-kejser", "pairs") in seen
    report = (tmp_path / "all" / "report.md").read_text()
    assert "## Ring vs split vs naive" in report
    assert "## Stuck slots" in report
    assert "## The Python floor" in report
    assert "## Django ring vs Django split" in report
    assert "## Targets" in report
    assert "PostgreSQL" in report
    for chart in ("push_single", "push_batch", "drain", "cycle", "pairs", "latency_cdf"):
        assert (tmp_path / "all" / "charts" / f"{chart}.png").stat().st_size > 1000


def test_the_ring_partitions_experiment(tmp_path: Path) -> None:
    args = ("--partitions", "1,2", "--capacity", "2000", "--seconds", "0.2")
    data = _bench(tmp_path / "partitions", *args, module="bench.ring_partitions")
    systems = {r["system"] for r in data["results"] if r["workload"] == "pairs"}
    assert systems == {"ring-plain", "ring-2-partitions"}
    assert "| pairs | pairs=2, batch=1" in (tmp_path / "partitions" / "report.md").read_text()


def test_the_ring_storage_experiment(tmp_path: Path) -> None:
    args = ("--fillfactors", "90", "--pairs", "1", "--seconds", "0.2", "--messages", "2000")
    data = _bench(tmp_path / "storage", *args, module="bench.ring_storage")
    sizes = {r["system"] for r in data["results"] if r["workload"] == "bloat_size"}
    assert sizes == {"ring-fillfactor-90"}
    assert "## Summary" in (tmp_path / "storage" / "report.md").read_text()


def test_the_compaction_cost_measurement(tmp_path: Path) -> None:
    data = _bench(tmp_path / "cost", "--rows", "1000", module="bench.compaction_cost")
    found = {(r["system"], r["params"]["rows"]) for r in data["results"]}
    assert found == {("dbqueue-core", 1000), ("dbqueue-ring", 1000)}
    assert "compaction cost" in (tmp_path / "cost" / "report.md").read_text()


def test_the_long_transaction_workload(tmp_path: Path) -> None:
    args = ("--workloads", "longtx", "--longtx-seconds", "2", "--no-pgbench", "--longtx-rates")
    data = _bench(tmp_path / "longtx", *args, "1200", "--systems", "dbqueue-core")
    ours = [r for r in data["results"] if r["system"] == "dbqueue-core"]
    assert {r["params"]["long_transaction"] for r in ours} == {"none", "held"}
    assert {r["params"]["rate"] for r in ours} == {1200.0}  # that rate only
    (held,) = [r for r in ours if r["workload"] == "longtx_throughput" and r["params"][
        "long_transaction"] == "held"]  # fmt: skip
    extra = held["extra"]
    for key in ("kib_fresh", "kib_before", "kib_baseline_median", "kib_end", "kib_after_recovery"):
        assert extra[key] > 0, key
    timeline = extra["timeline"]
    assert set(timeline["marks"]) == {"hold_start", "hold_end"}
    assert sum(n for _, n in timeline["served_per_second"]) >= 3 * 2 * 1200 * 0.9
    assert len(timeline["size_kib"]) >= 3
    assert (tmp_path / "longtx" / "charts" / "longtx_timeline_1200.png").stat().st_size > 1000
    assert "served_per_second" not in (tmp_path / "longtx" / "report.md").read_text()


def test_the_django_ring_refuses_a_workload_deeper_than_its_capacity() -> None:
    """Its model declares one capacity: a workload that needs more slots must fail at once,
    naming the capacity, rather than measure pushes waiting for a free slot (QueueFull)."""
    code = (
        "import sys\n"
        "from bench.systems import REGISTRY\n"
        "system = REGISTRY['dbqueue-ring-django'](sys.argv[1])\n"
        "system.expect(system.capacity)\n"
        "system.expect(system.capacity + 1)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    result = subprocess.run(
        [sys.executable, "-c", code, server_dsn()],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert "ValueError: dbqueue-ring-django: the workload keeps up to" in result.stderr
    assert "slots BenchTick declares (QueueOptions.capacity" in result.stderr


def test_the_ring_when_full_measurement(tmp_path: Path) -> None:
    args = ("--pushes", "200", "--capacity", "500")
    data = _run(tmp_path / "full", *args, module="bench.ring_when_full")
    assert set(data["results"]) == {"postgresql", "sqlite"}
    runs = data["results"]["postgresql"]["runs"]
    assert {"wait single", "spill single", "spill, ring full: spilled single"} <= set(runs)
    assert data["results"]["postgresql"]["bytes_per_slot"] > 0
    assert "spill / wait" in (tmp_path / "full" / "report.md").read_text()
