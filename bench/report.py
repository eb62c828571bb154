"""results.json, report.md and the charts of one run."""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import json
import math
import os
import subprocess
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.env import BenchEnv
from bench.measure import Measurement, params_text, ratios
from bench.systems import REGISTRY

VERSIONED = ("dbqueue", "django", "psycopg", "pgqueuer", "procrastinate", "django-tasks-db",
             "celery", "kombu", "redis")  # fmt: skip

WORKLOAD_TITLES = {
    "roundtrip": "Round trips (`SELECT 1`)",
    "push_single": "Single push (one transaction per message)",
    "push_batch": "Batch push",
    "drain": "Drain a backlog (no-op handler)",
    "cycle": "End to end: push_many + pop_batch + ack, batches of 100",
    "pairs": "Client pairs: push, then pop + ack on the pair's second connection (cycles/s)",
    "latency_p50": "Steady state: latency from push to handler start, median",
    "latency_p99": "Steady state: latency from push to handler start, 99th percentile",
    "latency_max": "Steady state: latency from push to handler start, maximum",
    "steady_throughput": "Steady state: messages served per second at the offered rate",
    "bloat_size": "Bloat soak: tables + indexes after N messages (one run)",
    "bloat_dead_tuples": "Bloat soak: dead tuples after N messages (one run)",
    "bloat_churn_rate": "Bloat soak: messages per second through push_many/pop/ack (one run)",
    "bloat_hot_updates": "Bloat soak: share of the updates that were HOT (heap-only, in place)",
    "longtx_throughput": "Long transaction: messages served per second at 1,000 msg/s offered",
    "longtx_p50": "Long transaction: latency median",
    "longtx_p99": "Long transaction: latency 99th percentile",
    "notify_cost": "Wake-ups: single pushes per second by NOTIFY mode (a worker LISTENing)",
    "pickup": "Wake-ups: an idle worker picks up a lone message, median latency",
    "stuck": "Stuck slots: one client pair on a ring of 64, with one slot a consumer holds",
}
#: Workloads whose figures are better when lower (ratios are still median / thin's).
LOWER_IS_BETTER = {"latency_p50", "latency_p99", "latency_max", "bloat_size",
                   "bloat_dead_tuples", "longtx_p50", "longtx_p99"}  # fmt: skip


def versions() -> dict[str, str]:
    """The installed versions of dbqueue, its frameworks and the peers."""
    out = {}
    for name in VERSIONED:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def source() -> str | None:
    """The commit of the working tree measured, and whether dbqueue/ differed from it."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "dbqueue"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return None
    if not head:
        return None
    return head + (" with uncommitted changes in dbqueue/" if dirty else "")


def run_meta(
    env: BenchEnv,
    started: dt.datetime,
    systems: list[str],
    seconds: float,
    scale: float | None,
    code: str | None,
) -> dict[str, Any]:
    """What the report's header and results.json record about a run; ``code``: what
    :func:`source` said when the run started (worker processes import the tree as it is)."""
    return env.describe() | {
        "started": started.strftime("%Y-%m-%d %H:%M UTC"),
        "quick": env.quick,
        "repeat": env.repeat,
        "process_repeat": env.process_repeat,
        "scale": scale,
        "versions": versions(),
        "source": code,
        "systems": systems,
        "notes": env.notes,
        "seconds": round(seconds, 1),
    }


def study_meta(env: BenchEnv, started: dt.datetime, elapsed: float, load: float) -> dict[str, Any]:
    """What a one-question bench (``python -m bench.unique_push``, ``bench.fanout``...) records
    about its run: when, on which server and settings, under which load (``load``: the load
    average when it started), from which source, with which package versions."""
    described = env.describe()
    return {
        "started": f"{started:%Y-%m-%d %H:%M} UTC",
        "seconds": round(elapsed, 1),
        "server": f"{described['server']}, PostgreSQL {described['postgresql']['server_version']}",
        "settings": described["postgresql"],
        "load": [load, os.getloadavg()[0]],
        "cpus": os.cpu_count(),
        "source": source(),
        "versions": versions(),
    }


def write_study(stem: Path, meta: dict[str, Any], results: Any, text: str) -> None:
    """A one-question bench's report: ``stem``.md (``text``) and ``stem``.json (its meta and
    results), and where it is, printed."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    stem.with_suffix(".md").write_text(text)
    print(f"report: {stem.with_suffix('.md')} ({meta['seconds']} s)")


#: The physical references' labels (bench/pgbench.py, bench/ring_pgbench.py).
PGBENCH_LABELS = {
    "pgbench": "pgbench running dbqueue's SQL (physical reference)",
    "pgbench-ring": "pgbench running the ring's statements, at least once (push, pop, ack)",
    "pgbench-ring-amo": "pgbench running the ring's statements, at most once (push, pop)",
    "pgbench-split": "pgbench running the split queue's statements (push, pop, ack)",
    "pgbench-naive": "pgbench running the naive queue (INSERT; DELETE ... FOR UPDATE)",
    "pgbench-kejser": "pgbench running a minimal ring (no crash safety; one client)",
}


def _label(system: str) -> str:
    if system in PGBENCH_LABELS:
        return PGBENCH_LABELS[system]
    cls = REGISTRY.get(system)
    return cls.label if cls else system


def _fmt(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:,.0f}" if x >= 100 else f"{x:,.2f}"


def _ratio(r: float) -> str:
    """A ratio with two decimals, or as a fraction below 0.1 (a ring's size is a few
    thousandths of a table queue's: 1/540)."""
    return f"{r:.2f}x" if r >= 0.1 or r <= 0 else f"1/{1 / r:,.0f}"


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


#: Side-by-side comparisons: a system, the systems it is compared with, and a title. Every
#: figure the first measured is shown with the others' and the ratios (first / other).
COMPARISONS: list[tuple[str, tuple[str, ...], str]] = [
    (
        "dbqueue-ring",
        ("dbqueue-core", "naive", "pgbench-ring", "pgbench-kejser"),
        "Ring vs split vs naive (pop + ack), and the SQL it runs under pgbench",
    ),
    (
        "dbqueue-ring-loop",
        ("dbqueue-core-loop", "dbqueue-core", "naive"),
        "Ring vs split, both popped by the worker's loop (ack_pop: one statement per batch)",
    ),
    (
        "dbqueue-ring-amo",
        ("naive", "dbqueue-core-amo", "pgbench-ring-amo", "pgbench-naive"),
        "Ring popped at most once vs naive (both settle in one statement per message)",
    ),
    ("dbqueue-core", ("pgbench-split",), "Split vs the SQL it runs under pgbench"),
    (
        "sql-ring",
        ("sql-split", "dbqueue-ring", "pgbench-ring"),
        "The Python floor: each layout's statements through the executor alone (ring vs "
        "split; the API over its floor; the floor over pgbench)",
    ),
    ("sql-split", ("dbqueue-core", "pgbench-split"), "The split layout's Python floor"),
    ("dbqueue-ring-django", ("dbqueue-django", "dbqueue-ring"), "Django ring vs Django split"),
    (
        "dbqueue-sa-asyncpg",
        ("dbqueue-sa-async", "dbqueue-sa"),
        "SQLAlchemy's asyncio API on asyncpg vs on psycopg, and the sync Session",
    ),
    (
        "dbqueue-django-async",
        ("dbqueue-django",),
        "Django's async twins (apush, apop_batch, aack) vs the sync manager",
    ),
]


def stuck_ratios(results: list[Measurement]) -> list[str]:
    """Each ring system's rate with a stuck slot of each kind over its rate without one."""
    stuck = [m for m in results if m.workload == "stuck"]
    base = {m.system: m.median for m in stuck if m.params.get("stuck") == "none"}
    rows = [
        f"| {m.system} | {m.params['stuck']} | {_fmt(m.median)} | {_fmt(base[m.system])} | "
        f"{m.median / base[m.system]:.2f}x |"
        for m in stuck
        if m.params.get("stuck") != "none" and base.get(m.system)
    ]
    if not rows:
        return []
    return [
        "## Stuck slots: throughput with one stuck slot over without",
        "",
        "| system | stuck slot | msg/s | without | ratio |",
        "|---|---|---:|---:|---:|",
        *rows,
        "",
    ]


def comparison(
    results: list[Measurement], subject: str, others: tuple[str, ...], title: str
) -> list[str]:
    """The lines of one comparison section (none if the subject or all the others are
    missing): per figure, each system's median, ``subject / other`` and the subject vs thin."""
    medians = {(m.system, m.key): m.median for m in results}
    rel = ratios(results)
    present = [o for o in others if any(m.system == o for m in results)]
    rows = []
    for i, m in enumerate(results):
        if m.system != subject:
            continue
        cells = [_fmt(m.median)]
        for other in present:
            value = medians.get((other, m.key))
            ratio = _ratio(m.median / value) if value else ""
            cells += [_fmt(value), ratio]
        thin = _ratio(rel[i]) if i in rel else ""
        rows.append(
            f"| {m.workload} | {params_text(m.params)} | {m.unit} | {' | '.join(cells)} | {thin} |"
        )
    if not present or not rows:
        return []
    head = " | ".join(f"{o} | {subject} / {o}" for o in present)
    return [
        f"## {title}",
        "",
        f"Medians of `{subject}` beside {', '.join(f'`{o}`' for o in present)}, same workload "
        "and parameters in the same run, and their ratios (for sizes, dead tuples and latencies "
        "lower is better, so a ratio below 1 favours the first).",
        "",
        f"| workload | parameters | unit | {subject} | {head} | {subject} vs thin |",
        "|---|---|---|" + "---:|" * (2 * len(present) + 2),
        *rows,
        "",
    ]


def write(
    out: Path, meta: dict[str, Any], results: list[Measurement], preface: Sequence[str] = ()
) -> Path:
    """Write results.json, report.md and charts/*.png into ``out``; return the report path.
    ``preface``: lines put right after the header (a summary of the run)."""
    out.mkdir(parents=True, exist_ok=True)
    rel = ratios(results)
    data = [dict(m.as_dict(), ratio_to_thin=rel.get(i)) for i, m in enumerate(results)]
    (out / "results.json").write_text(json.dumps({"meta": meta, "results": data}, indent=2))
    charts = _charts(out, results)
    lines = [*_header(meta), *preface]
    for subject, others, title in COMPARISONS:
        lines += comparison(results, subject, others, title)
    lines += stuck_ratios(results)
    by_workload: dict[str, list[int]] = defaultdict(list)
    for i, m in enumerate(results):
        by_workload[m.workload].append(i)
    for workload, idx in by_workload.items():
        lines += [f"## {WORKLOAD_TITLES.get(workload, workload)}", ""]
        for chart in charts.get(workload, []):
            lines += [f"![{workload}](charts/{chart})", ""]
        lines += ["| system | parameters | median | min | max | runs | unit | vs thin | notes |",
                  "|---|---|---:|---:|---:|---:|---|---:|---|"]  # fmt: skip
        for i in idx:
            m = results[i]
            note = ", ".join(f"{k} {v}" for k, v in m.extra.items() if k not in CHART_DATA)
            ratio = _ratio(rel[i]) if i in rel else ""
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
        *([f"- dbqueue source: {meta['source']}"] if meta.get("source") else []),
        f"- Systems: {', '.join(meta['systems'])}",
    ]
    lines += [f"- Note: {n}" for n in meta.get("notes", [])]
    return [*lines, ""]


#: Extras that only the charts show (series of points).
CHART_DATA = frozenset({"cdf", "timeline"})


def _charts(out: Path, results: list[Measurement]) -> dict[str, list[str]]:
    """One bar chart per workload: median per system and parameters, min-max as error bars;
    the latency CDF of the steady workload and the long-transaction timelines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = out / "charts"
    folder.mkdir(exist_ok=True)
    names: dict[str, list[str]] = defaultdict(list)
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
        names[workload].append(name)
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
        names["latency_p50"].append("latency_cdf.png")
    names["longtx_throughput"] += _timelines(folder, results)
    return names


def _timelines(folder: Path, results: list[Measurement]) -> list[str]:
    """Per offered rate of the long-transaction workload, one row per system: messages served
    per second (5-s means) and the tables' size, over the run, the hold shaded."""
    import matplotlib.pyplot as plt

    by_rate: dict[float, list[Measurement]] = defaultdict(list)
    for m in results:
        if m.extra.get("timeline"):
            by_rate[float(m.params["rate"])].append(m)
    files = []
    for rate, ms in sorted(by_rate.items()):
        fig, axes = plt.subplots(
            len(ms), 2, figsize=(11, 2.2 * len(ms) + 0.6), squeeze=False, sharex=True
        )
        for (served_ax, size_ax), m in zip(axes, ms, strict=True):
            line = m.extra["timeline"]
            served_ax.plot(*_means(line["served_per_second"]), marker=".", markersize=3)
            sizes = line["size_kib"]
            size_ax.plot([t for t, _ in sizes], [k / 1024 for _, k in sizes], color="#c44e52")
            size_ax.set_ylim(bottom=0)
            served_ax.set_ylim(bottom=0)
            marks = line["marks"]
            for ax in (served_ax, size_ax):
                if "hold_start" in marks and "hold_end" in marks:
                    ax.axvspan(marks["hold_start"], marks["hold_end"], color="#ddd", zorder=0)
                ax.tick_params(labelsize=7)
            served_ax.set_ylabel(f"{m.system}\nmsg/s", fontsize=7)
            size_ax.set_ylabel("MiB", fontsize=7)
        axes[0][0].set_title("messages served per second (5-s means; gaps: consumers restart "
                             "between phases)", fontsize=9)  # fmt: skip
        axes[0][1].set_title("size of the queue's tables (grey: transaction held)", fontsize=9)
        axes[-1][0].set_xlabel("seconds", fontsize=8)
        axes[-1][1].set_xlabel("seconds", fontsize=8)
        fig.suptitle(f"Long transaction at {rate:,.0f} msg/s offered", fontsize=10)
        fig.tight_layout()
        name = f"longtx_timeline_{rate:.0f}.png"
        fig.savefig(folder / name, dpi=100)
        plt.close(fig)
        files.append(name)
    return files


def _means(per_second: list[list[int]], window: int = 5) -> tuple[list[float], list[float]]:
    """Means over ``window`` seconds of per-second counts, within each stretch of seconds
    that has counts (a NaN between stretches breaks the line)."""
    xs: list[float] = []
    ys: list[float] = []
    counts = {int(t): n for t, n in per_second}
    stretch: list[int] = []
    for t in [*sorted(counts), None]:
        if t is not None and (not stretch or t == stretch[-1] + 1):
            stretch.append(t)
            continue
        for i in range(0, len(stretch), window):
            part = stretch[i : i + window]
            xs.append(part[0] + len(part) / 2)
            ys.append(sum(counts[x] for x in part) / len(part))
        xs.append(float("nan"))
        ys.append(float("nan"))
        stretch = [] if t is None else [t]
    return xs, ys


def load(path: Path) -> tuple[dict[str, Any], list[Measurement]]:
    """The meta and measurements of a results.json."""
    data = json.loads(path.read_text())
    fields = ("system", "workload", "params", "runs", "unit", "extra")
    results = [Measurement(**{k: r[k] for k in fields}) for r in data["results"]]
    return data["meta"], results


def main(argv: list[str]) -> int:
    """``python -m bench.report RESULTS_JSON [--note TEXT] [--out DIR]``: write the report of
    a finished run again (the same measurements, this version's tables), with notes added."""
    p = argparse.ArgumentParser(prog="python -m bench.report", description=main.__doc__)
    p.add_argument("results", type=Path, help="a run's results.json")
    p.add_argument("--note", action="append", default=[], help="a note for the header")
    p.add_argument("--out", type=Path, help="output folder (default: the results' own)")
    args = p.parse_args(argv)
    meta, results = load(args.results)
    meta["notes"] = [*meta.get("notes", []), *args.note]
    print(f"report: {write(args.out or args.results.parent, meta, results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
