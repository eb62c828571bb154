"""A smoke run of the benchmark harness on tiny sizes, so that it cannot rot. It asserts that
the run completes and writes its report, never a speed: figures belong in bench/results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pg import server_dsn, worker_id

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.postgresql, pytest.mark.django]


def test_the_harness_runs_every_workload_and_writes_its_report(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DBQUEUE_BENCH_DSN": server_dsn(),
        "DBQUEUE_BENCH_PREFIX": f"smoke_{worker_id()}_{os.getpid()}",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    systems = "thin,naive,dbqueue-core,dbqueue-core-amo,dbqueue-django"
    result = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--scale", "0.004", "--repeat", "1",
         "--systems", systems, "--out", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads((tmp_path / "results.json").read_text())
    seen = {(r["system"], r["workload"]) for r in data["results"]}
    for system in systems.split(","):
        for workload in ("push_single", "push_batch", "drain", "cycle"):
            assert (system, workload) in seen
    assert ("pgbench", "push_single") in seen
    assert all(r["median"] > 0 for r in data["results"])
    report = (tmp_path / "report.md").read_text()
    assert "## Targets" in report
    assert "PostgreSQL" in report
    for chart in ("push_single", "push_batch", "drain", "cycle"):
        assert (tmp_path / "charts" / f"{chart}.png").stat().st_size > 1000
