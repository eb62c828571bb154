"""The metrics example (``examples/metrics_worker.py``, docs/howto/metrics.md) runs as the
how-to says, and prints what its worker's endpoint served."""

from __future__ import annotations

import os
import sys

import pytest

from tests.processes import ROOT, run_process


@pytest.mark.sqlite
def test_the_example_prints_its_workers_metrics() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = run_process([sys.executable, "-m", "examples.metrics_worker", "--port", "0"], env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert 'dbqueue_pushed_total{queue="emails"} 20.0' in lines
    assert 'dbqueue_handled_total{queue="emails"} 16.0' in lines
    assert 'dbqueue_failed_total{outcome="retry",queue="emails"} 4.0' in lines
    assert 'dbqueue_depth{queue="emails",state="scheduled"} 4.0' in lines
    assert done.stderr == ""
