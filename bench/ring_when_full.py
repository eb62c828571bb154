"""``python -m bench.ring_when_full``: what ``when_full`` costs a ring, measured.

1. The hot path while the ring has room: pushes one at a time and in batches of 100 into a
   ring declared ``when_full="spill"`` against one declared ``"wait"`` (the plain ring), on
   PostgreSQL (the bench's server) and SQLite; the two rings take turns within each
   repetition, and are emptied between runs, so both always have room.
2. A spilled push: single pushes into a full ring that spills, against single pushes into
   the same ring with room.
3. Storage (PostgreSQL): the bytes of a fresh ring per slot, and the bytes the side table
   grows by per spilled message (what the sizing rule of docs/howto/ring-full.md uses).

The payload is the example shop's ``OrderEvent`` (a bigint and a decimal). Output:
``bench/results/<date>-ring-when-full/report.md`` and ``results.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any

import psycopg

from bench import env as bench_env
from bench import report
from dbqueue import Field, FieldKind, QueueOptions, QueueSpec, RingQueue, WhenFull, get_dialect
from dbqueue.drivers import executor_for
from dbqueue.executor import Executor
from dbqueue.schema import create_ring_statements, drop_ring_statements

RESULTS = Path(__file__).resolve().parent / "results"
FIELDS = (
    Field("order_id", FieldKind.BIGINT),
    Field("total", FieldKind.DECIMAL, max_digits=10, decimal_places=2),
)
BATCH = 100
#: The full ring of the spilled-push figure: small, so that filling it takes no time.
SMALL = 64
SPILLED = "spill, ring full: spilled single"


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.ring_when_full", description=__doc__)
    p.add_argument("--pushes", type=int, default=1000, help="messages per timed run")
    p.add_argument("--capacity", type=int, default=20_000, help="slots of the rings with room")
    p.add_argument("--repeat", type=int, default=15, help="runs per figure (median reported)")
    p.add_argument("--backends", default="postgresql,sqlite", help="comma-separated")
    p.add_argument("--out", type=Path, help="output folder (default bench/results/<date>-...)")
    return p.parse_args(argv)


def order(i: int) -> dict[str, Any]:
    return {"order_id": i, "total": Decimal("19.99")}


class Bed:
    """Rings on one database, each created afresh and dropped at the end."""

    def __init__(self, backend: str, target: str) -> None:
        self.backend, self.target = backend, target
        self.dialect = get_dialect(backend)
        self.conn: Any = self._connect()
        self.ex: Executor = executor_for(self.dialect, self.conn)
        self.specs: list[QueueSpec] = []

    def _connect(self) -> Any:
        if self.backend == "postgresql":
            return psycopg.connect(self.target, autocommit=True)
        from dbqueue.drivers.sqlite import connect

        return connect(self.target)

    def ring(self, table: str, capacity: int, when_full: str) -> RingQueue:
        options = QueueOptions(capacity=capacity, when_full=WhenFull(when_full))
        spec = QueueSpec(table, FIELDS, options)
        for statement in create_ring_statements(spec, self.dialect):
            self.conn.execute(statement)
        self.specs.append(spec)
        return RingQueue(spec, self.dialect)

    def size(self, table: str) -> int:
        """PostgreSQL: the table's bytes, with its indexes and TOAST, and its segments' (a
        ring of many slots is partitioned, see dbqueue.schema.ring_segment_bounds)."""
        rel = f"'\"{table}\"'::regclass"
        sql = (
            f"SELECT pg_total_relation_size({rel}) + coalesce((SELECT sum("
            f"pg_total_relation_size(t.relid)) FROM pg_partition_tree({rel}) AS t "
            f"WHERE t.isleaf AND t.relid <> {rel}), 0)"
        )
        return int(self.ex.execute(sql, {})[0][0])

    def close(self) -> None:
        for spec in self.specs:
            for statement in drop_ring_statements(spec, self.dialect):
                self.conn.execute(statement)
        self.conn.close()


def per_push_ms(run: Callable[[], object], count: int) -> float:
    started = time.perf_counter()
    run()
    return (time.perf_counter() - started) * 1000 / count


def singles(q: RingQueue, ex: Executor, n: int) -> None:
    for i in range(n):
        q.push(ex, order(i))


def batches(q: RingQueue, ex: Executor, n: int) -> None:
    for start in range(0, n, BATCH):
        q.push_many(ex, [order(i) for i in range(start, min(start + BATCH, n))])


def turns(bed: Bed, args: argparse.Namespace) -> tuple[dict[str, list[float]], int]:
    """Milliseconds per push: into the plain ring and the spilling one while they have room,
    one at a time and in batches, and into the small spilling ring while it is full (every
    push spilled); the three rings take turns in each repetition, so a drift of the shared
    machine falls on all alike. Also the side table's growth in bytes per spilled message
    (PostgreSQL, else 0)."""
    rings = {m: bed.ring(f"rwf_{m}", args.capacity, m) for m in ("wait", "spill")}
    full = bed.ring("rwf_small", SMALL, "spill")
    side = full.spec.failed_table
    runs: dict[str, list[float]] = {}
    n, ex = args.pushes, bed.ex
    for q in (*rings.values(), full):  # untimed: the connection's prepared statements
        q.push_many(ex, [order(i) for i in range(BATCH)])
        q.push(ex, order(0))
        q.purge(ex)
    grown = 0
    for _ in range(args.repeat):
        for mode, q in rings.items():
            runs.setdefault(f"{mode} single", []).append(per_push_ms(partial(singles, q, ex, n), n))
            q.purge(ex)
            batched = per_push_ms(partial(batches, q, ex, n), n)
            runs.setdefault(f"{mode} batch of {BATCH}", []).append(batched)
            q.purge(ex)
        singles(full, ex, SMALL)  # untimed: the ring full
        before = bed.size(side) if bed.backend == "postgresql" else 0
        runs.setdefault(SPILLED, []).append(per_push_ms(partial(singles, full, ex, n), n))
        if bed.backend == "postgresql":
            grown += bed.size(side) - before
        full.purge(ex)
    return runs, grown // (n * args.repeat)


def measure(backend: str, target: str, args: argparse.Namespace) -> dict[str, Any]:
    bed = Bed(backend, target)
    try:
        runs, per_spilled = turns(bed, args)
        found: dict[str, Any] = {"runs": runs}
        if backend == "postgresql":
            fresh = bed.ring("rwf_sized", args.capacity, "spill")
            found["bytes_per_slot"] = round(bed.size(fresh.spec.table) / args.capacity)
            found["bytes_per_spilled_message"] = per_spilled
        return found
    finally:
        bed.close()


def median(values: list[float]) -> float:
    return statistics.median(values)


def markdown(meta: dict[str, Any], results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "# A ring's behaviour when full (when_full)",
        "",
        f"Run {meta['started']}, {meta['seconds']} s; {meta['pushes']:,} pushes per run, "
        f"{meta['repeat']} runs per figure (median), rings of {meta['capacity']:,} slots "
        f"(the spilled-push figure: {SMALL} slots), payload: the shop's OrderEvent (bigint, "
        f"decimal). Server: {meta['server']}. Load average (1 min) at the start and the end: "
        f"{meta['load'][0]:.1f}, {meta['load'][1]:.1f} on {meta['cpus']} CPUs.",
        "",
    ]
    for backend, found in results.items():
        runs = found["runs"]
        lines += [
            f"## {backend}",
            "",
            "| figure | ms per message (median) | runs |",
            "|---|---:|---|",
        ]
        for name, values in runs.items():
            shown = ", ".join(f"{v:.3f}" for v in values)
            lines.append(f"| {name} | {median(values):.3f} | {shown} |")
        lines.append("")
        for kind in ("single", f"batch of {BATCH}"):
            ratio = median(runs[f"spill {kind}"]) / median(runs[f"wait {kind}"])
            lines.append(f"- hot path, {kind}: spill / wait = {ratio:.2f}x")
        room, full = median(runs["spill single"]), median(runs[SPILLED])
        lines.append(f"- a spilled push: {full:.3f} ms against {room:.3f} ms with room")
        if "bytes_per_slot" in found:
            lines.append(f"- bytes per slot (fresh ring): {found['bytes_per_slot']:,}")
            per = found["bytes_per_spilled_message"]
            lines.append(f"- bytes per spilled message (side table growth): {per:,}")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = parse(argv)
    backends = [b for b in args.backends.split(",") if b]
    env = bench_env.start(quick=False, sync_commit=True, scale=None)
    started, t0 = dt.datetime.now(dt.UTC), time.perf_counter()
    load = os.getloadavg()[0]
    results: dict[str, dict[str, Any]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for backend in backends:
                target = (
                    env.database("ring_when_full")
                    if backend == "postgresql"
                    else str(Path(tmp) / "ring_when_full.sqlite3")
                )
                results[backend] = measure(backend, target, args)
                print(f"{backend}: done", flush=True)
        described = env.describe()
        version = described["postgresql"].get("server_version", "?")
        server = f"{described['server']}, PostgreSQL {version}"
    finally:
        if "postgresql" in backends:
            env.drop("ring_when_full")
    meta = {
        "started": f"{started:%Y-%m-%d %H:%M} UTC",
        "seconds": round(time.perf_counter() - t0, 1),
        "pushes": args.pushes,
        "repeat": args.repeat,
        "capacity": args.capacity,
        "server": server,
        "load": [load, os.getloadavg()[0]],
        "cpus": os.cpu_count(),
        "versions": report.versions(),
    }
    out = args.out or RESULTS / f"{started:%Y-%m-%d}-ring-when-full"
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    (out / "report.md").write_text(markdown(meta, results))
    print(f"report: {out / 'report.md'} ({meta['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
