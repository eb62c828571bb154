"""The load test (``make loadtest`` runs the full one): its short run, a real gunicorn and
worker on a database of its own, must pass its own checks; and the pieces that read what the
run left behind (the server's error lines, the outbox, the percentiles)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from bench.loadtest.load import Outcome, figures, percentile
from bench.loadtest.server_log import ErrorLine, causes
from bench.loadtest.verify import emails
from tests.pg import server_dsn

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.postgresql
@pytest.mark.slow
@pytest.mark.soak  # a minute of gunicorn under load: make test-soak
def test_the_short_load_test_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DBQUEUE_BENCH_DSN": server_dsn(),
        "DBQUEUE_BENCH_PREFIX": f"lt_{uuid.uuid4().hex[:8]}",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [sys.executable, "-m", "bench.loadtest", "--quick", "--out", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-6000:]
    summary = json.loads((tmp_path / "loadtest.json").read_text())
    verdict = summary["verdict"]
    assert summary["drained"] and summary["ok"]
    assert verdict["orders"] > 0 and verdict["acknowledged_missing"] == 0
    assert verdict["confirmations_lost"] == verdict["sales_lost"] == verdict["emails_lost"] == 0
    assert verdict["left_in_queues"] == {}
    names = [p["name"] for p in summary["phases"]]
    assert names == [
        "steady",
        "worker killed (SIGKILL), restarted",
        "worker stopped (SIGTERM)",
        "worker restarted",
        "web connections cut (pg_terminate_backend)",
    ]
    stopped = summary["phases"][2]["notes"]
    assert stopped[0].startswith("exited 0 "), stopped  # the graceful stop
    # The worker's connections: one per thread, the maintenance thread's, the listener's, and
    # the lease thread's once it extended a batch. The killed worker's backends, left until each
    # notices its client gone, are counted apart.
    limit = summary["config"]["worker_concurrency"] + 3
    assert summary["max_connections"]["shop-worker"] <= limit
    assert "| phase | notes |" in (tmp_path / "loadtest.md").read_text()


def test_the_error_lines_name_the_status_and_the_exception(tmp_path: Path) -> None:
    try:
        raise KeyError("x")
    except KeyError:
        record = logging.LogRecord(
            "django.request", logging.ERROR, "", 0, "boom", (), sys.exc_info()
        )
    record.status_code = 503
    log = tmp_path / "web.log"
    log.write_text(
        f"{ErrorLine().format(record)}\n"
        "[2026-11-27 10:00:00 +0000] [1] [CRITICAL] WORKER TIMEOUT (pid:2)\n"
        "loadtest-error status=500 exception=dbqueue.errors.QueueFull\n"
        "[INFO] Worker exiting (pid: 3)\n"
    )
    assert causes(log) == {
        "503 builtins.KeyError": 1,
        "500 dbqueue.errors.QueueFull": 1,
        "gunicorn: worker timeout": 1,
    }


def test_the_outbox_counts_each_orders_emails(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text(
        "Subject: Order #1 confirmed\n\n-----\nSubject: Order #2 confirmed\n"
    )
    (tmp_path / "b.log").write_text("Subject: Order #1 confirmed\nSubject: Order #3 confi")  # cut
    assert emails(tmp_path) == {1: 2, 2: 1}


def test_the_figures_count_2xx_and_name_the_rest() -> None:
    outcomes = [Outcome(float(i), 0.01 * (i + 1), 201, order=i) for i in range(98)]
    outcomes += [Outcome(98.0, 2.0, 500), Outcome(99.0, 35.0, None, "RemoteDisconnected")]
    got = figures(outcomes, seconds=10.0)
    assert (got.requests, got.ok, got.rate) == (100, 98, 9.8)
    assert got.non_2xx == {"500": 1, "no response: RemoteDisconnected": 1}
    assert got.p50_ms == 500.0 and got.p99_ms == 2000.0
    assert percentile([], 0.5) is None
