"""``dbqueue worker --metrics-port``: the worker's metrics served over HTTP, on every database
the ``url`` fixture gives; a bad port and a missing ``metrics`` extra as one-line errors."""

from __future__ import annotations

import signal
import sys
import urllib.request
from pathlib import Path

import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from bench.loadtest.shop import free_port
from dbqueue.metrics import EXTRA_MISSING
from dbqueue_sa.cli import main
from tests.processes import PATIENCE, wait_for
from tests.sqlalchemy.cli_support import dbqueue, push_jobs, start

pytestmark = pytest.mark.sqlalchemy

APP = "tests.sqlalchemy.handlers_app"


def scrape(port: int) -> dict[tuple[str, str], float]:
    """(sample name, queue label) to value; empty while nothing listens yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=PATIENCE) as r:
            text = r.read().decode()
    except OSError:
        return {}
    return {
        (s.name, s.labels.get("queue", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.labels.get("outcome") in (None, "failed")
    }


def test_the_worker_serves_its_metrics(engine: sa.Engine, url: str, tmp_path: Path) -> None:
    port, log = free_port(), tmp_path / "worker.log"
    proc = start("worker", "--url", url, APP, "--queue", "sa_job", "--metrics-port", str(port),
                 log=log)  # fmt: skip
    try:
        push_jobs(engine, 5)
        wait_for(lambda: scrape(port).get(("dbqueue_handled_total", "sa_job")) == 5,
                 "5 jobs handled on the metrics port", log)  # fmt: skip
        found = scrape(port)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(PATIENCE) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert found[("dbqueue_pushed_total", "sa_job")] == 5
    assert found[("dbqueue_stats_up", "sa_job")] == 1
    assert found[("dbqueue_failed_total", "sa_job")] == 0
    assert found[("dbqueue_handler_duration_seconds_count", "sa_job")] == 5


@pytest.mark.parametrize("value", ["-1", "65536", "http"])
def test_a_bad_metrics_port_is_a_usage_error(value: str) -> None:
    done = dbqueue("worker", "--url", "sqlite:///x.db", APP, "--metrics-port", value)
    assert done.returncode == 2
    assert "--metrics-port" in done.stderr.strip().splitlines()[-1]


def test_without_the_extra_the_metrics_port_names_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    # Refused before connecting: the URL names no database that exists.
    status = main(["worker", "--url", "sqlite:///no/such/dir/x.db", APP, "--metrics-port", "0"])
    assert status == 1
    assert capsys.readouterr().err == f"dbqueue worker: error: {EXTRA_MISSING}\n"
