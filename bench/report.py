"""results.json, report.md and the charts of one run."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.measure import Measurement, params_text, ratios
from bench.systems import REGISTRY

WORKLOAD_TITLES = {
    "roundtrip": "Round trips (`SELECT 1`)",
    "push_single": "Single push (one transaction per message)",
    "push_batch": "Batch push",
    "drain": "Drain a backlog (no-op handler)",
    "cycle": "End to end: push_many + pop_batch + ack, batches of 100",
    "latency_p50": "Steady state: latency from push to handler start, median",
    "latency_p99": "Steady state: latency from push to handler start, 99th percentile",
    "latency_max": "Steady state: latency from push to handler start, maximum",
    "steady_throughput": "Steady state: messages served per second at the offered rate",
    "bloat_size": "Bloat soak: tables + indexes after N messages (one run)",
    "bloat_dead_tuples": "Bloat soak: dead tuples after N messages (one run)",
    "bloat_churn_rate": "Bloat soak: messages per second through push_many/pop/ack (one run)",
    "longtx_throughput": "Long transaction: messages served per second at 1,000 msg/s offered",
    "longtx_p50": "Long transaction: latency median",
    "longtx_p99": "Long transaction: latency 99th percentile",
    "notify_cost": "Wake-ups: single pushes per second by NOTIFY mode (a worker LISTENing)",
    "pickup": "Wake-ups: an idle worker picks up a lone message, median latency",
}
#: Workloads whose figures are better when lower (ratios are still median / thin's).
LOWER_IS_BETTER = {"latency_p50", "latency_p99", "latency_max", "bloat_size",
                   "bloat_dead_tuples", "longtx_p50", "longtx_p99"}  # fmt: skip


def _label(system: str) -> str:
    if system == "pgbench":
        return "pgbench running dbqueue's SQL (physical reference)"
    cls = REGISTRY.get(system)
    return cls.label if cls else system


def _fmt(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:,.0f}" if x >= 100 else f"{x:,.2f}"


def _find(results: list[Measurement], system: str, workload: str, **params: Any) -> float | None:
    for m in results:
        if (
            m.system == system
            and m.workload == workload
            and all(m.params.get(k) == v for k, v in params.items())
        ):
            return m.median
    return None


#: The issue's targets: (title, numerator, denominator, goal ratio). A side is
#: (system, workload, params); a row is reported when both sides ran.
Side = tuple[str, str, dict[str, Any]]
#: dbqueue's drainers in the targets: the worker, and the Django pop_batch/ack loop before it.
DRAINERS = [("dbqueue-worker", "`runqueueworker`"), ("dbqueue-django", "Django pop_batch/ack loop")]
TARGETS: list[tuple[str, Side, Side, float]] = [
    ("Django `push()` vs thin loop, single push",
     ("dbqueue-django", "push_single", {}), ("thin", "push_single", {}), 0.9),
    *[(f"Django `push_many` vs pgqueuer batch enqueue (batch {b})",
       ("dbqueue-django", "push_batch", {"batch": b}), ("pgqueuer", "push_batch", {"batch": b}), 2)
      for b in (100, 1000)],
    *[(f"{label} drain vs pgqueuer's, {w} worker(s)",
       (system, "drain", {"workers": w, "batch": 100}),
       ("pgqueuer", "drain", {"workers": w, "batch": 10}), 10)
      for system, label in DRAINERS for w in (1, 2)],
    *[(f"{label} drain vs django-tasks-db's, {w} worker(s)",
       (system, "drain", {"workers": w, "batch": 100}),
       ("django-tasks-db", "drain", {"workers": w, "batch": 1}), 100)
      for system, label in DRAINERS for w in (1, 2)],
    ("core `push()` vs pgbench running the same SQL",
     ("dbqueue-core", "push_single", {}), ("pgbench", "push_single", {}), 0.85),
    *[(f"core `push_many` vs pgbench, same SQL (batch {b})",
       ("dbqueue-core", "push_batch", {"batch": b}), ("pgbench", "push_batch", {"batch": b}), 0.85)
      for b in (100, 1000)],
    ("core at-most-once cycle vs pgbench, same SQL (2 clients)",
     ("dbqueue-core-amo", "cycle", {"workers": 2}), ("pgbench", "cycle", {"workers": 2}), 0.85),
]  # fmt: skip
E2E_GOAL = 100_000


def targets(results: list[Measurement]) -> list[tuple[str, str, str, str]]:
    """The issue's targets, as (target, measured, goal, verdict), where both sides ran."""
    rows = []
    for title, (s1, w1, p1), (s2, w2, p2), goal in TARGETS:
        num, den = _find(results, s1, w1, **p1), _find(results, s2, w2, **p2)
        if num is None or not den:
            continue
        r = num / den
        verdict = "met" if r >= goal else f"missed ({r / goal:.0%} of the goal)"
        rows.append((title, f"{r:.2f}x", f">= {goal:g}x", verdict))
    cycles = [m.median for m in results if m.workload == "cycle" and m.system.startswith("dbqueue")]
    if cycles:
        e2e = max(cycles)
        verdict = "met" if e2e >= E2E_GOAL else f"missed by {E2E_GOAL - e2e:,.0f} msg/s"
        rows.append(("End to end through the Python API (best dbqueue cycle)",
                     f"{_fmt(e2e)} msg/s", f">= {E2E_GOAL:,} msg/s", verdict))  # fmt: skip
    return rows


def write(out: Path, meta: dict[str, Any], results: list[Measurement]) -> Path:
    """Write results.json, report.md and charts/*.png into ``out``; return the report path."""
    out.mkdir(parents=True, exist_ok=True)
    rel = ratios(results)
    data = [dict(m.as_dict(), ratio_to_thin=rel.get(i)) for i, m in enumerate(results)]
    (out / "results.json").write_text(json.dumps({"meta": meta, "results": data}, indent=2))
    charts = _charts(out, results)
    lines = _header(meta)
    by_workload: dict[str, list[int]] = defaultdict(list)
    for i, m in enumerate(results):
        by_workload[m.workload].append(i)
    for workload, idx in by_workload.items():
        lines += [f"## {WORKLOAD_TITLES.get(workload, workload)}", ""]
        if workload in charts:
            lines += [f"![{workload}](charts/{charts[workload]})", ""]
        lines += ["| system | parameters | median | min | max | runs | unit | vs thin | notes |",
                  "|---|---|---:|---:|---:|---:|---|---:|---|"]  # fmt: skip
        for i in idx:
            m = results[i]
            note = ", ".join(f"{k} {v}" for k, v in m.extra.items() if k != "cdf")
            ratio = f"{rel[i]:.2f}x" if i in rel else ""
            lines.append(
                f"| {_label(m.system)} | {params_text(m.params)} | {_fmt(m.median)} | "
                f"{_fmt(min(m.runs))} | {_fmt(max(m.runs))} | {len(m.runs)} | {m.unit} | "
                f"{ratio} | {note} |"
            )
        lines.append("")
    rows = targets(results)
    if rows:
        lines += ["## Targets", "", "| target | measured | goal | verdict |", "|---|---:|---:|---|"]
        lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
        lines.append("")
    report = out / "report.md"
    report.write_text("\n".join(lines))
    return report


def _header(meta: dict[str, Any]) -> list[str]:
    m, pg = meta["machine"], meta["postgresql"]
    lines = [
        f"# dbqueue benchmark — {meta['started']}{' (quick)' if meta['quick'] else ''}",
        "",
        f"Every figure is the median of its runs ({meta['repeat']} for in-process workloads, "
        f"{meta['process_repeat']} for those that start worker processes; the soaks run once), "
        "with min and max beside it; ratios divide by the thin psycopg loop measured in the same "
        "run on the same server. Absolute numbers drift on a shared machine; ratios hold.",
        "",
        f"- Machine: {m['platform']}, {m['cpus']} CPUs, {m['memory_gb']} GB, Python {m['python']}",
        f"- PostgreSQL ({meta['server']}): " + ", ".join(f"{k} = {v}" for k, v in pg.items()),
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
        f"- Systems: {', '.join(meta['systems'])}",
    ]
    lines += [f"- Note: {n}" for n in meta.get("notes", [])]
    return [*lines, ""]


def _charts(out: Path, results: list[Measurement]) -> dict[str, str]:
    """One bar chart per workload: median per system and parameters, min-max as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = out / "charts"
    folder.mkdir(exist_ok=True)
    names: dict[str, str] = {}
    by_workload: dict[str, list[Measurement]] = defaultdict(list)
    for m in results:
        by_workload[m.workload].append(m)
    for workload, ms in by_workload.items():
        labels = [f"{m.system}\n{params_text(m.params)}" for m in ms]
        medians = [m.median for m in ms]
        low = [m.median - min(m.runs) for m in ms]
        high = [max(m.runs) - m.median for m in ms]
        fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(ms) + 2), 4.5))
        ax.bar(range(len(ms)), medians, yerr=[low, high], capsize=3, color="#4c72b0")
        ax.set_xticks(range(len(ms)), labels, rotation=60, ha="right", fontsize=7)
        ax.set_ylabel(ms[0].unit)
        ax.set_title(WORKLOAD_TITLES.get(workload, workload).replace("`", ""))
        fig.tight_layout()
        name = f"{workload}.png"
        fig.savefig(folder / name, dpi=110)
        plt.close(fig)
        names[workload] = name
    cdfs = {m.system: m.extra["cdf"] for m in results if m.extra.get("cdf")}
    if cdfs:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for system, points in cdfs.items():
            ax.plot([p[0] for p in points], [p[1] for p in points], label=system)
        ax.set_xscale("log")
        ax.set_xlabel("latency from push to handler start (ms, log scale)")
        ax.set_ylabel("fraction of messages")
        ax.set_title("Steady state: latency CDF")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(folder / "latency_cdf.png", dpi=110)
        plt.close(fig)
        names["latency_p50"] = "latency_cdf.png"
    return names
