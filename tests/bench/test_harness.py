"""Smoke runs of the benchmark harness on tiny sizes, so that it cannot rot. They assert that
a run completes and writes its report, never a speed: figures belong in bench/results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.pg import server_dsn, worker_id

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.postgresql, pytest.mark.django]
OURS = ("thin", "naive", "dbqueue-core", "dbqueue-core-amo", "dbqueue-django")
PEERS = ("pgqueuer", "procrastinate", "django-tasks-db", "celery-redis")


def _bench(out: Path, *args: str) -> dict[str, Any]:
    env = {
        **os.environ,
        "DBQUEUE_BENCH_DSN": server_dsn(),
        "DBQUEUE_BENCH_PREFIX": f"smoke_{worker_id()}_{os.getpid()}_{out.name}",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    cmd = [sys.executable, "-m", "bench", "--repeat", "1", "--out", str(out), *args]
    result = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    data: dict[str, Any] = json.loads((out / "results.json").read_text())
    # Dead tuples may be 0 (autovacuum got there first); every other figure is positive.
    empty = [
        (r["system"], r["workload"], r["params"])
        for r in data["results"]
        if not r["median"] > 0 and r["workload"] != "bloat_dead_tuples"
    ]
    assert not empty, empty
    return data


def test_every_system_through_the_quick_workloads(tmp_path: Path) -> None:
    systems = ",".join(OURS + PEERS)
    data = _bench(tmp_path / "all", "--quick", "--scale", "0.002", "--systems", systems)
    seen = {(r["system"], r["workload"]) for r in data["results"]}
    for system in OURS + PEERS:
        for workload in ("push_single", "drain", "steady_throughput", "latency_p99"):
            assert (system, workload) in seen
    for system in OURS:
        for workload in ("push_batch", "cycle", "bloat_size", "bloat_dead_tuples"):
            assert (system, workload) in seen
    assert ("pgbench", "push_single") in seen
    report = (tmp_path / "all" / "report.md").read_text()
    assert "## Targets" in report
    assert "PostgreSQL" in report
    for chart in ("push_single", "push_batch", "drain", "cycle", "latency_cdf"):
        assert (tmp_path / "all" / "charts" / f"{chart}.png").stat().st_size > 1000


def test_the_long_transaction_workload(tmp_path: Path) -> None:
    args = ("--workloads", "longtx", "--longtx-seconds", "2", "--no-pgbench")
    data = _bench(tmp_path / "longtx", *args, "--systems", "dbqueue-core")
    held = {r["params"]["long_transaction"] for r in data["results"] if r["system"] != "thin"}
    assert held == {"none", "held"}
