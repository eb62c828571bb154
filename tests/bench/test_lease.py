"""A worker process killed with SIGKILL mid-batch loses nothing: once its lease expired, a
second worker rescues its items and handles them. And bench.lease, which measures how soon,
run small (no timing asserted: figures belong in bench/reports)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from bench.env import BenchEnv
from bench.lease import POSTGRESQL, Round, create_queue, spec, wait_lines
from dbqueue import SplitQueue
from dbqueue.drivers.psycopg import PsycopgExecutor
from tests.bench.test_harness import ROOT, _drop_databases
from tests.pg import server_dsn, worker_id

pytestmark = [pytest.mark.slow, pytest.mark.postgresql]

#: Short, so that the test waits a few seconds; long enough that a loaded machine does not
#: stall the lease thread past it.
LEASE = 3.0
#: Seconds to wait for the items to come back: many leases (no timing is asserted).
PATIENCE = 120.0


def test_a_killed_workers_batch_is_handled_by_a_second_worker(tmp_path: Path) -> None:
    env = BenchEnv(server_dsn(), Path(), prefix=f"lease_{worker_id()}_{os.getpid()}")
    dsn = env.database("kill")
    queue = SplitQueue(spec(LEASE), POSTGRESQL)
    keys = [f"0:{i}" for i in range(5)]
    create_queue(dsn, LEASE)
    one = Round(dsn, LEASE, tmp_path, "kill")
    try:
        victim = one.take(keys)  # A holds the whole batch, B waits
        victim.kill()
        assert victim.wait() == -9
        assert one.a_log.read_text().splitlines() == ["ready", "took 5"]

        def settled(lines: list[str]) -> bool:
            with psycopg.connect(dsn, autocommit=True) as conn:
                s = queue.stats(PsycopgExecutor(conn))
            return (s.ready, s.scheduled, s.leased, s.failed) == (0, 0, 0, 0)  # all acked

        wait_lines(one.b_log, settled, PATIENCE)
        assert sorted(key for key, _ in one.handled(keys)) == keys  # each once, by B
    finally:
        one.close()
        env.drop("kill")


def test_the_lease_bench_runs_small(tmp_path: Path) -> None:
    prefix = f"smoke_lease_{worker_id()}_{os.getpid()}"
    env = {**os.environ, "DBQUEUE_BENCH_DSN": server_dsn(), "DBQUEUE_BENCH_PREFIX": prefix}
    args = ["--leases", "2", "--rounds", "1", "--batch", "3", "--slots", "200",
            "--rescue-repeat", "2", "--out", str(tmp_path)]  # fmt: skip
    try:
        done = subprocess.run(
            [sys.executable, "-m", "bench.lease", *args],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
    finally:
        _drop_databases(f"{prefix}_")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    results = json.loads((tmp_path / "results.json").read_text())["results"]
    assert {r["workload"] for r in results} == {
        "lease_recovery",
        "lease_stall_survived",
        "rescue_ms",
    }
    assert all(r["runs"] for r in results)
    fleets = {r["params"].get("fleet") for r in results if r["workload"] == "lease_recovery"}
    assert fleets == {"idle", "busy"}
    assert "## By lease" in (tmp_path / "report.md").read_text()
