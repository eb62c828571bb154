"""The chaos run, short (``make chaos`` runs it for 10 minutes): on a cluster of its own,
workers killed and stopped, the server crash-restarted, a snapshot held, REPEATABLE READ the
database's default for a while; then nothing lost, nothing unexpected, duplicates within
what the faults explain, none through transactional pops, and the ring no larger than
before."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.chaos.check import judge, read_deliveries, read_pushes

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@pytest.mark.postgresql
def test_a_short_chaos_run_loses_nothing(tmp_path: Path) -> None:
    pytest.importorskip("pgserver", reason="the embedded extra provides the cluster")
    done = subprocess.run(
        [sys.executable, "-m", "bench.chaos", "--minutes", "2", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    summary = json.loads((tmp_path / "chaos.json").read_text())
    assert summary["drained"]
    assert sum(summary["faults"].values()) >= 10
    assert summary["faults"]["repeatable_read"] >= 1  # a REPEATABLE READ default for a while
    for verdict in summary["verdicts"]:
        assert verdict["pushed"] > 0 and verdict["lost"] == 0 and verdict["unexpected"] == 0
        assert verdict["duplicates"] <= verdict["allowed_duplicates"]
    tx = summary["verdicts"][-1]
    assert tx["allowed_duplicates"] == 0 == tx["duplicates"]
    assert summary["ring_size_after"] <= 1.1 * summary["ring_size_before"]
    assert "| queue | pushed |" in (tmp_path / "chaos.md").read_text()


def test_the_check_counts_lost_unexpected_and_duplicate_messages(tmp_path: Path) -> None:
    (tmp_path / "producer-0.log").write_text("+a:0\n+a:1\n?a:2\n+a:3\n")
    (tmp_path / "worker-0.log").write_text("a:0\na:1\na:1\na:2\nz:9\na:")  # cut by a kill
    pushed, uncertain = read_pushes([tmp_path / "producer-0.log"])
    delivered = read_deliveries([tmp_path / "worker-0.log"])
    verdict = judge("split", pushed, uncertain, delivered, allowed_duplicates=1)
    assert (verdict.pushed, verdict.uncertain, verdict.delivered) == (3, 1, 5)
    assert (verdict.lost, verdict.unexpected, verdict.duplicates) == (1, 1, 1)  # a:3; z:9; a:1
    assert not verdict.ok
