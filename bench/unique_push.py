"""``python -m bench.unique_push``: what unique items cost a push (issue 22 §2).

On the bench's embedded PostgreSQL (autovacuum on), through the core on one connection, each
in autocommit (a push is its own transaction, as in a view that pushes and returns):

- single pushes per second into a plain split queue, a unique one with a new key every push,
  and the unique one with the key of an item already there (the duplicate path: the push
  writes nothing and reads the holder in a second statement);
- ``push_many`` of 1,000 rows per statement: plain, unique with every key new, and unique with
  half of the keys held already.

Each figure is the median of ``--repeat`` rounds, each of which runs every case once (the
queue emptied before each run): on a shared machine the cases drift alike. Output:
``bench/reports/<date>-unique-push.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from bench import env as bench_env
from bench import report
from bench.systems.base import PAYLOAD
from dbqueue import Field, FieldKind, QueueOptions, QueueSpec, SplitQueue, get_dialect
from dbqueue.drivers.psycopg import PsycopgExecutor
from dbqueue.schema import create_statements

REPORTS = Path(__file__).resolve().parent / "reports"
FIELDS = (Field("key", FieldKind.TEXT), Field("payload", FieldKind.TEXT))
QUEUES = {
    "plain": QueueOptions(notify_interval=None),
    "unique": QueueOptions(unique=("key",), notify_interval=None),
}
BATCH = 1_000
BATCH_PLAIN = "push_many 1,000, plain queue"


def _queue(name: str) -> SplitQueue:
    spec = QueueSpec(f"bench_unique_{name}", FIELDS, QUEUES[name])
    return SplitQueue(spec, get_dialect("postgresql"))


def measure(dsn: str, singles: int, batches: int, repeat: int) -> dict[str, Any]:
    """Every figure, by its label: pushes (or rows) per second, the runs and their median."""
    results: dict[str, Any] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        ex = PsycopgExecutor(conn)
        queues = {name: _queue(name) for name in QUEUES}
        for q in queues.values():
            for statement in create_statements(q.spec, q.dialect):
                conn.execute(statement)

        def empty(q: SplitQueue) -> Callable[[], None]:
            def run() -> None:
                conn.execute(f"TRUNCATE {q.spec.table}, {q.spec.meta_table}")

            return run

        def singles_run(q: SplitQueue, duplicate: bool) -> Callable[[], float]:
            def run() -> float:
                if duplicate:
                    q.push(ex, {"key": "held", "payload": PAYLOAD})
                start = time.perf_counter()
                for i in range(singles):
                    q.push(ex, {"key": "held" if duplicate else f"k{i}", "payload": PAYLOAD})
                return singles / (time.perf_counter() - start)

            return run

        def batches_run(q: SplitQueue, held_share: float) -> Callable[[], float]:
            def run() -> float:
                held = int(BATCH * held_share)
                if held:
                    q.push_many(ex, [{"key": f"h{i}", "payload": PAYLOAD} for i in range(held)])
                rows = 0
                start = time.perf_counter()
                for b in range(batches):
                    keys = [f"h{i}" for i in range(held)] + [
                        f"b{b}-{i}" for i in range(BATCH - held)
                    ]
                    q.push_many(ex, [{"key": k, "payload": PAYLOAD} for k in keys])
                    rows += BATCH
                return rows / (time.perf_counter() - start)

            return run

        plain, unique = queues["plain"], queues["unique"]
        cases: dict[str, tuple[SplitQueue, Callable[[], float]]] = {
            "push, plain queue": (plain, singles_run(plain, False)),
            "push, unique queue, new key": (unique, singles_run(unique, False)),
            "push, unique queue, duplicate": (unique, singles_run(unique, True)),
            BATCH_PLAIN: (plain, batches_run(plain, 0)),
            "push_many 1,000, unique queue, new keys": (unique, batches_run(unique, 0)),
            "push_many 1,000, unique queue, half held": (unique, batches_run(unique, 0.5)),
        }
        # Interleaved: each round runs every case once, so a drift of the machine (a shared
        # one, or the WAL disk) falls on all of them alike.
        runs: dict[str, list[float]] = {label: [] for label in cases}
        for _ in range(repeat):
            for label, (q, run) in cases.items():
                empty(q)()
                runs[label].append(run())
        for label, rates in runs.items():
            results[label] = {
                "runs": [round(r) for r in rates],
                "median": round(statistics.median(rates)),
            }
            print(f"{label}: {results[label]['median']:,} /s", flush=True)
        for q in queues.values():
            conn.execute(f"DROP TABLE {q.spec.table}, {q.spec.meta_table}")
    return results


def markdown(meta: dict[str, Any], results: dict[str, Any]) -> str:
    """The report: each figure and its ratio to the plain queue's of the same kind."""
    lines = [
        "# Unique items: what they cost a push (issue 22 §2)",
        "",
        f"{meta['started']}, {meta['server']}; load average {meta['load'][0]:.1f} → "
        f"{meta['load'][1]:.1f} on {meta['cpus']} CPUs; source {meta['source']}; "
        f"{meta['repeat']} interleaved rounds, median shown. Single pushes: "
        f"{meta['singles']:,} per run, each its own transaction; push_many: "
        f"{meta['batches']} batches of 1,000 rows.",
        "",
        "| case | per second | vs plain |",
        "|---|---:|---:|",
    ]
    for label, figure in results.items():
        plain = "push, plain queue" if label.startswith("push,") else BATCH_PLAIN
        base = results[plain]["median"]
        lines.append(f"| {label} | {figure['median']:,} | {figure['median'] / base:.2f}x |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.unique_push", description=__doc__)
    parser.add_argument("--singles", type=int, default=5_000, help="single pushes per run")
    parser.add_argument("--batches", type=int, default=20, help="push_many batches per run")
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--out", type=Path, help="report path without suffix")
    args = parser.parse_args(argv)
    env = bench_env.start(quick=False, sync_commit=True, scale=None)
    started, t0, load = dt.datetime.now(dt.UTC), time.perf_counter(), os.getloadavg()[0]
    dsn = env.database("unique")
    try:
        results = measure(dsn, args.singles, args.batches, args.repeat)
    finally:
        env.drop("unique")
    meta = report.study_meta(env, started, time.perf_counter() - t0, load) | {
        "singles": args.singles,
        "batches": args.batches,
        "repeat": args.repeat,
    }
    stem = args.out or REPORTS / f"{started:%Y-%m-%d}-unique-push"
    report.write_study(stem, meta, results, markdown(meta, results))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
