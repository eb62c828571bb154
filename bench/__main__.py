"""``python -m bench``: run the systems through the workloads and write the report."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

from bench import env as bench_env
from bench import pgbench, report, ring_pgbench, wakeup
from bench.catalog import WORKLOADS
from bench.measure import Measurement
from bench.systems import REGISTRY
from bench.workloads import PAIRS

RESULTS = Path(__file__).resolve().parent / "results"


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--quick", action="store_true", help="small sizes: the whole run in minutes")
    p.add_argument(
        "--scale", type=float, help="multiply every full-run size (the test suite uses a tiny one)"
    )
    p.add_argument(
        "--repeat",
        type=int,
        help="runs per figure, median reported (default 3; --quick: 3 "
        "in-process, 1 for workloads that start worker processes)",
    )
    p.add_argument("--systems", default=",".join(_ordered()), help="comma-separated system names")
    p.add_argument(
        "--workloads",
        help="comma-separated workloads (default: all; --quick leaves out longtx, whose "
        "point needs minutes)",
    )
    p.add_argument(
        "--longtx-seconds", type=float, default=300.0, help="long-transaction hold (seconds)"
    )
    p.add_argument(
        "--longtx-holder",
        choices=("snapshot", "xid"),
        default="snapshot",
        help="what holds the horizon: a REPEATABLE READ snapshot on another table, or a "
        "session idle in transaction after a write (an xid)",
    )
    p.add_argument(
        "--no-longtx-max",
        action="store_true",
        help="run the long-transaction workload at 1,000 msg/s only, not also at the highest "
        "rate each system sustains",
    )
    p.add_argument(
        "--longtx-rates",
        type=_rates,
        default=(),
        help="comma-separated offered rates (msg/s) to run the long-transaction workload at, "
        "instead of 1,000 msg/s and the highest rate each system sustains",
    )
    p.add_argument(
        "--bloat-messages",
        type=int,
        help="messages through the bloat soak (default 1,000,000; --quick: 10,000)",
    )
    p.add_argument(
        "--pairs",
        type=_counts,
        help="client pairs of the pairs workload, comma-separated (default 1,2,4)",
    )
    p.add_argument(
        "--pair-seconds", type=float, help="seconds per pairs figure (default 5; --quick: 1.5)"
    )
    p.add_argument("--no-pgbench", action="store_true", help="skip the pgbench reference")
    p.add_argument(
        "--no-ring-pgbench",
        action="store_true",
        help="skip only the pgbench ring references of the pairs workload (25 minutes at 30 s)",
    )
    p.add_argument("--sync-commit", choices=("on", "off"), default="on")
    p.add_argument("--out", type=Path, help="output folder (default bench/results/<date>)")
    p.add_argument(
        "--note", action="append", default=[], help="a note for the report's header (repeatable)"
    )
    return p.parse_args(argv)


def _rates(text: str) -> tuple[float, ...]:
    try:
        rates = tuple(float(r) for r in text.split(",") if r)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not rates: {text!r}") from None
    if not rates or min(rates) <= 0:
        raise argparse.ArgumentTypeError(f"rates must be positive: {text!r}")
    return rates


def _counts(text: str) -> tuple[int, ...]:
    """A comma-separated list of positive integers."""
    counts = tuple(int(x) for x in text.split(",") if x)
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return counts


def _ordered() -> list[str]:
    """References first (every ratio divides by thin, so an interrupted run keeps them),
    then dbqueue, then the peers."""
    refs = [n for n in ("thin", "naive") if n in REGISTRY]
    ours = sorted(n for n in REGISTRY if n.startswith("dbqueue"))
    return refs + ours + sorted(set(REGISTRY) - set(refs) - set(ours))


def main(argv: list[str]) -> int:
    args = parse(argv)
    repeat = args.repeat or 3
    names = [s for s in args.systems.split(",") if s]
    unknown = sorted(set(names) - set(REGISTRY))
    if unknown:
        sys.exit(f"unknown system(s) {', '.join(unknown)}; known: {', '.join(REGISTRY)}")
    default = [w for w in [*WORKLOADS, "wakeup"] if not (args.quick and w == "longtx")]
    wanted = [w for w in args.workloads.split(",") if w] if args.workloads else default
    env = bench_env.start(args.quick, args.sync_commit == "on", args.scale)
    env.longtx_seconds = args.longtx_seconds
    env.longtx_holder = args.longtx_holder
    env.longtx_max = not args.no_longtx_max
    env.longtx_rates = args.longtx_rates
    env.notes += args.note
    env.bloat_messages = args.bloat_messages
    env.pair_counts = args.pairs
    env.pair_seconds = args.pair_seconds
    env.repeat = repeat
    env.process_repeat = args.repeat or (1 if args.quick else 3)
    started = dt.datetime.now(dt.UTC)
    code = report.source()
    suffix = ("-quick" if args.quick else "") + ("" if env.sync_commit else "-sync-off")
    out = args.out or RESULTS / f"{started:%Y-%m-%d}{suffix}"
    results: list[Measurement] = []
    t0 = time.perf_counter()
    if "thin" in names and "roundtrip" not in wanted:
        results.append(pgbench.python_roundtrips(env, repeat))
    if not args.no_pgbench:
        step = time.perf_counter()
        keep = {*wanted, "roundtrip"}
        results += [m for m in pgbench.measure(env, repeat) if m.workload in keep]
        print(f"pgbench reference {time.perf_counter() - step:.1f} s", flush=True)
        rings = any(n.startswith("dbqueue-ring") for n in names)
        if "pairs" in wanted and rings and not args.no_ring_pgbench:
            step = time.perf_counter()
            seconds = env.pair_seconds or (1.5 if env.quick else 5.0)
            results += ring_pgbench.measure(env, env.pair_counts or PAIRS, seconds)
            print(f"pgbench ring references {time.perf_counter() - step:.1f} s", flush=True)
    for name in names:
        cls = REGISTRY[name]
        system = cls.create(env)
        try:
            for workload in wanted:
                if workload in cls.workloads:
                    step = time.perf_counter()
                    results += WORKLOADS[workload](env, system, repeat)
                    print(f"{name}: {workload} {time.perf_counter() - step:.1f} s", flush=True)
        finally:
            system.close()
        # A long run interrupted later keeps what it measured so far.
        if name != names[-1]:
            seconds = time.perf_counter() - t0
            meta = report.run_meta(env, started, names, seconds, args.scale, code)
            report.write(out, meta, results)
    if "wakeup" in wanted and "dbqueue-worker" in names:
        step = time.perf_counter()
        results += wakeup.measure(env)
        print(f"wake-ups {time.perf_counter() - step:.1f} s", flush=True)
    meta = report.run_meta(env, started, names, time.perf_counter() - t0, args.scale, code)
    path = report.write(out, meta, results)
    print(f"report: {path} ({meta['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
