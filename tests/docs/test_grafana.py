"""The Grafana dashboard committed under docs/grafana: valid JSON, and every ``dbqueue_*``
series its queries read is one that dbqueue exposes (a renamed metric breaks no panel
silently)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from dbqueue.metrics import DepthCollector, WorkerCollector
from dbqueue.worker.tallies import Tallies

DASHBOARD = Path(__file__).parents[2] / "docs" / "grafana" / "dbqueue.json"
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def exposed() -> set[str]:
    families = [*DepthCollector(list).describe(), *WorkerCollector(Tallies()).describe()]
    return {f.name + suffix for f in families for suffix in SUFFIXES[f.type]}


def test_the_dashboard_reads_only_series_dbqueue_exposes() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {name for expr in exprs for name in re.findall(r"\bdbqueue_[a-z_]+", expr)}
    assert used, "no dbqueue series in the dashboard"
    assert used <= exposed(), used - exposed()
    assert {p["title"] for p in dashboard["panels"]} >= {
        "Items by state",
        "Oldest ready item",
        "Handler duration p50 and p99",
    }
