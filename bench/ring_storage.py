"""``python -m bench.ring_storage``: the ring table's fillfactor, measured.

dbqueue.schema sets the slot table's fillfactor (``RING_FILLFACTOR``) after inserting the
preallocated slots, as this script does for each candidate. For each one it measures the
pairs workload (cycles per second: push, then pop + ack on the pair's second connection) and
the bloat soak (tables + indexes after N messages, the share of HOT updates, the churn rate).
The candidates take turns within each repetition, so a drift of the shared machine falls on
all of them alike. Output: ``bench/results/<date>-ring-storage/report.md`` (a summary table,
then every figure) and ``results.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from bench import env as bench_env
from bench import report, soak, workloads
from bench.measure import Measurement, params_text
from bench.systems.dbqueue_core import POSTGRESQL
from bench.systems.dbqueue_ring import DBQueueRing
from dbqueue.schema import create_ring_statements

RESULTS = Path(__file__).resolve().parent / "results"
#: The figures of the summary: workload, and whether higher is better.
SUMMARY = {"pairs": True, "bloat_churn_rate": True, "bloat_size": False, "bloat_hot_updates": True}


def experiment_parser(module: str, doc: str | None, seconds: float) -> argparse.ArgumentParser:
    """The options every ring experiment takes: repetitions, client pairs, seconds per pairs
    figure (default ``seconds``), the output folder."""
    p = argparse.ArgumentParser(prog=f"python -m {module}", description=doc)
    p.add_argument("--repeat", type=int, default=3, help="runs per figure (median reported)")
    p.add_argument("--pairs", type=int, default=2, help="client pairs")
    p.add_argument("--seconds", type=float, default=seconds, help="seconds per pairs figure")
    p.add_argument("--out", type=Path, help="output folder (default bench/results/<date>-...)")
    return p


def parse(argv: list[str]) -> argparse.Namespace:
    p = experiment_parser("bench.ring_storage", __doc__, 2.0)
    p.add_argument("--fillfactors", default="50,70,90,100", help="candidates, comma-separated")
    p.add_argument("--messages", type=int, default=200_000, help="messages per bloat soak")
    return p.parse_args(argv)


def label(fillfactor: int) -> str:
    return f"ring-fillfactor-{fillfactor}"


def measure_once(
    env: bench_env.BenchEnv, system: DBQueueRing, fillfactor: int, pairs: int, seconds: float
) -> list[Measurement]:
    """One run of every figure with the slot table at ``fillfactor``."""
    # After the slots are inserted, as dbqueue.schema sets RING_FILLFACTOR.
    system.create_statements = lambda spec: [
        *create_ring_statements(spec, POSTGRESQL),
        f"ALTER TABLE {spec.table} SET (fillfactor = {fillfactor})",
    ]
    found = workloads.run_pairs(
        env, system, (pairs,), workloads.PAIR_BATCHES, ("on", "off"), seconds
    )
    found += soak.bloat(env, system, 1)
    for m in found:
        m.system = label(fillfactor)
    return found


def merge(measurements: Iterable[Measurement]) -> list[Measurement]:
    """One Measurement per system and key, with the runs of every repetition."""
    merged: dict[tuple[str, Any], Measurement] = {}
    for m in measurements:
        known = merged.get((m.system, m.key))
        if known is None:
            merged[(m.system, m.key)] = m
        else:
            known.runs += m.runs
    return list(merged.values())


def take_turns[C](
    system: DBQueueRing,
    candidates: list[C],
    repeat: int,
    measure: Callable[[C], list[Measurement]],
    name: Callable[[C], str],
) -> list[Measurement]:
    """Measure every candidate once per repetition, the candidates taking turns (a drift of
    the shared machine falls on all of them alike); the runs merged. Closes ``system``."""
    found: list[Measurement] = []
    try:
        for rep in range(repeat):
            for candidate in candidates:
                step = time.perf_counter()
                found += measure(candidate)
                took = time.perf_counter() - step
                print(f"run {rep + 1}: {name(candidate)} {took:.1f} s", flush=True)
    finally:
        system.close()
    return merge(found)


def summary(results: list[Measurement], columns: dict[str, str]) -> list[str]:
    """A table: one row per figure, one column per candidate (``columns``: system name to
    heading), the best in bold."""
    systems = list(columns)
    lines = [
        "## Summary",
        "",
        "Medians; the best of each row in bold (size: lowest; the others: highest). "
        "HOT: the share of the soak's updates that were heap-only (in place, no index entry).",
        "",
        f"| figure | parameters | unit | {' | '.join(columns.values())} |",
        "|---|---|---|" + "---:|" * len(systems),
    ]
    by = {(m.system, m.key): m for m in results}
    keys = [m.key for m in results if m.system == systems[0]]
    for key in keys:
        workload, _ = key
        if workload not in SUMMARY:
            continue
        row = [by.get((system, key)) for system in systems]
        medians = [m.median for m in row if m is not None]
        best = (max if SUMMARY[workload] else min)(medians)
        cells = []
        for m in row:
            if m is None:
                cells.append("")
                continue
            text = f"{m.median:,.1f}" if m.unit == "%" else f"{m.median:,.0f}"
            cells.append(f"**{text}**" if m.median == best else text)
        first = next(m for m in row if m is not None)
        lines.append(
            f"| {workload} | {params_text(first.params)} | {first.unit} | {' | '.join(cells)} |"
        )
    return [*lines, ""]


def main(argv: list[str]) -> int:
    args = parse(argv)
    fillfactors = [int(f) for f in args.fillfactors.split(",") if f]
    env = bench_env.start(quick=False, sync_commit=True, scale=None)
    env.repeat = env.process_repeat = 1  # the repetitions are this script's own loop
    env.bloat_messages = args.messages
    started, t0 = dt.datetime.now(dt.UTC), time.perf_counter()
    code = report.source()
    system = DBQueueRing.create(env)
    results = take_turns(
        system,
        fillfactors,
        args.repeat,
        lambda f: measure_once(env, system, f, args.pairs, args.seconds),
        label,
    )
    env.repeat = env.process_repeat = args.repeat
    env.notes.append(
        f"ring storage experiment: fillfactor {', '.join(map(str, fillfactors))} set after the "
        f"slots are inserted (as dbqueue.schema does), {args.pairs} client pairs for "
        f"{args.seconds:g} s per cycles figure, bloat soak of {args.messages:,} messages; "
        f"every figure, the soak's too, is the median of {args.repeat} runs"
    )
    names = [label(f) for f in fillfactors]
    meta = report.run_meta(env, started, names, time.perf_counter() - t0, None, code)
    out = args.out or RESULTS / f"{started:%Y-%m-%d}-ring-storage"
    columns = {label(f): f"fillfactor {f}" for f in fillfactors}
    path = report.write(out, meta, results, summary(results, columns))
    print(f"report: {path} ({meta['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
