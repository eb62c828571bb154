"""The chaos run, short (``make chaos`` runs it for 10 minutes): on a cluster of its own,
workers killed and stopped, the server crash-restarted, a snapshot held, REPEATABLE READ the
database's default for a while, pg_dump all along; then nothing lost, nothing unexpected,
duplicates within what the faults explain, none through transactional pops, every dump
holding what it must, and the ring no larger than before."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.chaos.check import (
    DumpVerdict,
    Outstanding,
    copied_rows,
    dump_line,
    judge,
    read_deliveries,
    read_pushes,
    ring_keys,
    split_keys,
)

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@pytest.mark.postgresql
@pytest.mark.soak  # two minutes of kills and restarts: make test-soak
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
    dumps = summary["dumps"]  # pg_dump all along: each dump held what it had to
    assert dumps["checked"] >= 10 and dumps["ok"]
    assert not any(dumps["missing"].values()) and dumps["items"]["split"] > 0
    report = (tmp_path / "chaos.md").read_text()
    assert "| queue | pushed |" in report
    assert "| queue | messages that had to be in the dumps |" in report


def test_the_check_counts_lost_unexpected_and_duplicate_messages(tmp_path: Path) -> None:
    (tmp_path / "producer-0.log").write_text("+a:0\n+a:1\n?a:2\n+a:3\n")
    (tmp_path / "worker-0.log").write_text("a:0\na:1\na:1\na:2\nz:9\na:")  # cut by a kill
    pushed, uncertain = read_pushes([tmp_path / "producer-0.log"])
    delivered = read_deliveries([tmp_path / "worker-0.log"])
    verdict = judge("split", pushed, uncertain, delivered, allowed_duplicates=1)
    assert (verdict.pushed, verdict.uncertain, verdict.delivered) == (3, 1, 5)
    assert (verdict.lost, verdict.unexpected, verdict.duplicates) == (1, 1, 1)  # a:3; z:9; a:1
    assert not verdict.ok


#: A plain-format dump's data (what ``pg_restore --data-only -f -`` writes), cut down.
DUMP_TEXT = """--
COPY public.chaos_split (id, key, enqueued_at, last_error) FROM stdin;
1\ts:0\t2026-12-07 10:00:00+00\t\\N
2\ts:2\t2026-12-07 10:00:00+00\t\\N
\\.

COPY public.chaos_split_meta (id, state, priority, run_at, attempts, lease_until) FROM stdin;
1\t1\t0\t2026-12-07 10:00:00+00\t1\t2026-12-07 10:00:03+00
\\.

COPY public.chaos_ring (slot, seq, state, attempts, key) FROM stdin;
0\t8\t0\t1\tr:0
1\t9\t1\t0\tr:1
2\t10\t2\t1\tr:2
\\.

COPY public.chaos_ring_failed (id, state, key) FROM stdin;
7\t4\tr:7
\\.
"""


def test_the_dump_check_finds_a_message_a_dump_lacks(tmp_path: Path) -> None:
    (tmp_path / "producer-split-0.log").write_text("+s:0\n+s:1\n+s:2\n?s:3\n+s:4")  # cut
    outstanding = Outstanding(tmp_path)
    outstanding.read_pushes()
    assert outstanding.keys["split"] == {"s:0", "s:1", "s:2"}
    # s:9 is taken before its push is read: it never counts as outstanding.
    (tmp_path / "worker-split-0.log").write_text("s:1\ns:9\n")
    assert outstanding.read_deliveries() == {"split": {"s:1", "s:9"}}
    with (tmp_path / "producer-split-0.log").open("a") as log:
        log.write("\n+s:9\n")  # the cut line ends: s:4 is pushed, then s:9
    outstanding.read_pushes()
    assert outstanding.keys["split"] == {"s:0", "s:2", "s:4"}

    rows = copied_rows(DUMP_TEXT)
    assert rows["chaos_split"][1] == {
        "id": "2", "key": "s:2", "enqueued_at": "2026-12-07 10:00:00+00", "last_error": None
    }  # fmt: skip
    held = split_keys(rows, "chaos_split", "chaos_split_meta")
    assert held == {"s:0"}  # s:2 has no meta row: not in the queue
    assert ring_keys(rows, "chaos_ring", "chaos_ring_failed") == {"r:1", "r:2", "r:7"}

    verdict = DumpVerdict()
    verdict.add(dump_line(0, {"split": {"s:0", "s:2"}}, {"split": held}, early=True))
    verdict.add(dump_line(1, None, error="the server restarted"))
    assert (verdict.taken, verdict.failed, verdict.checked, verdict.early) == (2, 1, 1, 1)
    assert (verdict.items, verdict.missing) == ({"split": 2}, {"split": 1})
    assert verdict.examples == ["split s:2"] and not verdict.ok
