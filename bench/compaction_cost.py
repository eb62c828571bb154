"""``python -m bench.compaction_cost``: how long compaction holds a queue's lock, by the rows
it copies.

Compaction (dbqueue.upkeep.compaction) rewrites a queue's tables with VACUUM FULL, each under
an ACCESS EXCLUSIVE lock: every statement on the queue waits meanwhile. This script measures
that time for the split layout holding a backlog of N messages and for a ring of N slots
(half of them holding a message), each after N more messages passed while a REPEATABLE READ
transaction held the xmin horizon, then ended (the grown tables compaction is there for; it
does not rewrite while the horizon is held). The figures set ``MAX_ROWS``, the most rows a
compaction copies, against the issue's bound of 100 ms on any lock. Output:
``bench/results/<date>-compaction-cost/report.md`` and ``results.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

from bench import env as bench_env
from bench import report
from bench.longtx import TransactionHolder
from bench.measure import Measurement
from bench.systems.base import PAYLOAD
from bench.systems.dbqueue_core import CoreSystem, DBQueueCore
from bench.systems.dbqueue_ring import DBQueueRing, ring_capacity
from dbqueue.upkeep import compaction

RESULTS = Path(__file__).resolve().parent / "results"
BATCH = 1000


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.compaction_cost", description=__doc__)
    p.add_argument("--rows", default="1000,5000,10000,20000,50000", help="N, comma-separated")
    p.add_argument("--repeat", type=int, default=3, help="runs per figure (median reported)")
    p.add_argument("--out", type=Path, help="output folder (default bench/results/<date>-...)")
    return p.parse_args(argv)


def measure_once(system: CoreSystem, rows: int) -> tuple[float, int, int]:
    """Fill the queue, pass ``rows`` messages under a held horizon, compact: the compaction's
    seconds, and the tables' bytes before and after it."""
    q, ex = system.queue, system.ex
    ring = isinstance(system, DBQueueRing)
    held = rows // 2 if ring else rows
    # A ring has rows // 2 free slots: the passing batches take half of them at most.
    step = min(BATCH, rows // 4) if ring else BATCH
    payloads = [{"payload": PAYLOAD}] * BATCH
    for start in range(0, held, BATCH):
        q.push_many(ex, payloads[: min(BATCH, held - start)])
    holder = TransactionHolder(system.dsn)
    try:
        for _ in range(0, rows, step):
            q.push_many(ex, payloads[:step])
            q.ack(ex, q.pop_batch(ex, step), strict=False)
    finally:
        holder.release()
    # Tried again while the horizon is still held: by the queue's own last statements a moment
    # longer, or by a transaction with an xid anywhere on the server (it pins every database).
    deadline = time.monotonic() + 60
    while True:
        result = compaction.compact(q, ex, lock_timeout=dt.timedelta(seconds=5))
        if result.compacted or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if not result.compacted:
        raise RuntimeError(f"{system.name}: compaction of {rows} rows skipped: {result.skipped}")
    return result.seconds, result.size_before, result.size_after


def main(argv: list[str]) -> int:
    args = parse(argv)
    sizes = [int(n) for n in args.rows.split(",") if n]
    env = bench_env.start(quick=False, sync_commit=True, scale=None)
    started, t0 = dt.datetime.now(dt.UTC), time.perf_counter()
    code = report.source()
    limit, compaction.MAX_ROWS = compaction.MAX_ROWS, max(sizes) * 2  # measure past the limit
    results: list[Measurement] = []
    for cls in (DBQueueCore, DBQueueRing):
        system = cls.create(env)
        try:
            for rows in sizes:
                runs, before, after = [], 0, 0
                for _ in range(args.repeat):
                    # A ring of ``rows`` slots: ring_capacity gives twice the depth it is told.
                    system.expect(rows // 2 if cls is DBQueueRing else rows)
                    system.reset()
                    seconds, before, after = measure_once(system, rows)
                    runs.append(seconds * 1000)
                extra = {"kib_before": round(before / 1024), "kib_after": round(after / 1024)}
                if cls is DBQueueRing:
                    extra["slots"] = ring_capacity(rows // 2)
                results.append(Measurement(system.name, "compaction_ms", {"rows": rows}, runs,
                                           unit="ms", extra=extra))  # fmt: skip
                print(f"{system.name}: {rows} rows {sorted(runs)[len(runs) // 2]:.1f} ms",
                      flush=True)  # fmt: skip
        finally:
            system.close()
    env.repeat = env.process_repeat = args.repeat
    env.notes.append(
        f"compaction cost: split with a backlog of N messages, ring of N slots half full, each "
        f"after N messages passed under a REPEATABLE READ transaction, ended before the "
        f"compaction; the time of its rewrite (VACUUM FULL, its locks held: nothing else waited "
        f"for it); dbqueue copies at most MAX_ROWS = {limit:,} rows"
    )
    meta = report.run_meta(env, started, ["dbqueue-core", "dbqueue-ring"],
                           time.perf_counter() - t0, None, code)  # fmt: skip
    out = args.out or RESULTS / f"{started:%Y-%m-%d}-compaction-cost"
    path = report.write(out, meta, results)
    print(f"report: {path} ({meta['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
