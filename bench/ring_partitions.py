"""``python -m bench.ring_partitions``: what a ring's hot paths pay when its slot table is split
into partitions by slot range.

Compaction (dbqueue.compaction) copies a queue's live rows under its lock, so the lock grows
with a ring's capacity (bench/reports/2026-11-26-compaction-cost.md: 131 ms at 20,000
slots). A slot table partitioned by slot range could be compacted a partition at a time,
each lock bounded by a partition's size. But every hot statement then plans over the
partitions and locks each of them (a generic plan locks every partition it may prune at run
time). This script measures that price: the pairs workload (a pusher and a popper
connection per pair, batches of 1 and 100, synchronous_commit on and off) on a ring of
``--capacity`` slots, as dbqueue.schema makes it and split into 2, 4 and 8 partitions, the
candidates taking turns within each repetition. Output:
``bench/results/<date>-ring-partitions/report.md`` and ``results.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

from bench import env as bench_env
from bench import report, workloads
from bench.measure import Measurement
from bench.ring_storage import experiment_parser, summary, take_turns
from bench.systems.dbqueue_core import POSTGRESQL
from bench.systems.dbqueue_ring import DBQueueRing
from dbqueue import QueueSpec
from dbqueue.schema import (
    create_ring_statements,
    ring_segments_statement,
    ring_tuning_statements,
)

RESULTS = Path(__file__).resolve().parent / "results"


def parse(argv: list[str]) -> argparse.Namespace:
    p = experiment_parser("bench.ring_partitions", __doc__, 5.0)
    p.add_argument("--partitions", default="1,2,4,8", help="candidates (1: no partitioning)")
    p.add_argument("--capacity", type=int, default=24_000, help="the ring's slots")
    return p.parse_args(argv)


def label(partitions: int) -> str:
    return "ring-plain" if partitions == 1 else f"ring-{partitions}-partitions"


def partitioned_statements(spec: QueueSpec, partitions: int) -> list[str]:
    """dbqueue.schema's statements for ``spec``, the slot table split by slot range into
    ``partitions`` segments whatever its capacity (1: one table), each segment with the
    ring's storage parameters (a partitioned table takes none itself)."""
    capacity = spec.options.capacity
    assert capacity is not None
    bounds = [] if partitions == 1 else [capacity * i // partitions for i in range(partitions + 1)]
    tuning = set(ring_tuning_statements(spec, POSTGRESQL))
    (plain,) = ring_tuning_statements(spec, POSTGRESQL, plain=True)
    ring = POSTGRESQL.quote(spec.table)
    out: list[str] = []
    for statement in create_ring_statements(spec, POSTGRESQL):
        if statement in tuning:
            continue  # set on each table that stores slots, below
        if statement.startswith("DO $$") and "PARTITION BY RANGE (slot)" in statement:
            out.append(ring_segments_statement(spec, POSTGRESQL, bounds))
            for i in range(partitions if bounds else 0):
                part = POSTGRESQL.quote(spec.segment_table(i))
                out.append(plain.replace(f"ALTER TABLE {ring} ", f"ALTER TABLE {part} ", 1))
            if not bounds:
                out.append(plain)
            continue
        out.append(statement)
    return out


def measure_once(
    env: bench_env.BenchEnv, system: DBQueueRing, partitions: int, pairs: int, seconds: float
) -> list[Measurement]:
    """One run of every pairs figure with the slot table in ``partitions`` partitions."""
    system.create_statements = lambda spec: partitioned_statements(spec, partitions)
    found = workloads.run_pairs(
        env, system, (pairs,), workloads.PAIR_BATCHES, workloads.SYNC_COMMIT, seconds
    )
    for m in found:
        m.system = label(partitions)
    return found


def main(argv: list[str]) -> int:
    args = parse(argv)
    candidates = [int(k) for k in args.partitions.split(",") if k]
    env = bench_env.start(quick=False, sync_commit=True, scale=None)
    env.repeat = env.process_repeat = 1  # the repetitions are this script's own loop
    started, t0 = dt.datetime.now(dt.UTC), time.perf_counter()
    code = report.source()
    system = DBQueueRing.create(env)
    system.min_capacity = args.capacity
    results = take_turns(
        system,
        candidates,
        args.repeat,
        lambda k: measure_once(env, system, k, args.pairs, args.seconds),
        label,
    )
    env.repeat = env.process_repeat = args.repeat
    env.notes.append(
        f"ring partitions experiment: a ring of {args.capacity:,} slots, its slot table as "
        f"dbqueue.schema makes it and partitioned by slot range into "
        f"{', '.join(str(k) for k in candidates if k > 1)} tables; {args.pairs} client pairs "
        f"for {args.seconds:g} s per figure; every figure the median of {args.repeat} runs"
    )
    names = {label(k): "plain" if k == 1 else f"{k} partitions" for k in candidates}
    meta = report.run_meta(env, started, list(names), time.perf_counter() - t0, None, code)
    out = args.out or RESULTS / f"{started:%Y-%m-%d}-ring-partitions"
    path = report.write(out, meta, results, summary(results, names))
    print(f"report: {path} ({meta['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
