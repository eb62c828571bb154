"""``python -m bench.loadtest.throughput [--conn-max-age 0,60] [--seconds S] [--rounds N]``:
the example shop's orders per second under gunicorn, as fast as ``--clients`` clients get
answers, with each ``CONN_MAX_AGE``: a new database connection per request (0) against one
kept between requests. The values take turns in each round, so a drift of the machine falls
on all of them; writes ``throughput.md`` and ``.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import env as bench_env
from bench.loadtest import report
from bench.loadtest.arguments import conn_max_age, positive
from bench.loadtest.load import Load, figures
from bench.loadtest.shop import ROOT, ConnectionSampler, Shop, ShopConfig

WARM_UP = 3.0


def measure(config: ShopConfig, clients: int, seconds: float) -> dict[str, Any]:
    """One measurement: the shop started with ``config``, warmed up, loaded for ``seconds``."""
    shop = Shop(config)
    sampler = ConnectionSampler(config.dsn)
    load = Load(shop.port, clients, None)
    try:
        shop.start_worker()
        shop.start_web()
        sampler.start()
        load.start()
        time.sleep(WARM_UP)
        start = time.monotonic()
        time.sleep(seconds)
        end = time.monotonic()
        load.stop()
        return {
            **figures(load.between(start, end), end - start).as_dict(),
            "max_connections": dict(sampler.most),
        }
    finally:
        load.stop()
        sampler.stop()
        shop.stop()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.loadtest.throughput", description=__doc__)
    p.add_argument("--conn-max-age", default="0,60", help="values to compare, comma-separated")
    p.add_argument("--seconds", type=float, default=30.0, help="seconds measured per run")
    p.add_argument("--rounds", type=positive, default=2)
    p.add_argument("--clients", type=positive, default=16)
    p.add_argument("--web-workers", type=positive, default=4)
    p.add_argument("--out", type=Path)
    p.add_argument("--note", action="append", default=[])
    args = p.parse_args(argv)
    ages = [conn_max_age(v) for v in args.conn_max_age.split(",")]
    day = dt.date.today().isoformat()
    out = args.out or ROOT / "bench" / "results" / f"{day}-loadtest-throughput"
    env = bench_env.start(quick=False, sync_commit=True, scale=None)
    logs = Path(tempfile.mkdtemp(prefix="dbqueue-throughput-"))
    runs: dict[str, list[dict[str, Any]]] = {str(a): [] for a in ages}
    try:
        dsn = env.database("loadtest_throughput")
        base = ShopConfig(dsn=dsn, logs=logs, web_workers=args.web_workers)
        Shop(base).migrate()
        for round_ in range(args.rounds):
            for age in ages:
                config = ShopConfig(dsn=dsn, logs=logs, web_workers=args.web_workers,
                                    conn_max_age=age, health_checks=age != 0)  # fmt: skip
                result = measure(config, args.clients, args.seconds)
                runs[str(age)].append(result)
                print(f"round {round_ + 1}: CONN_MAX_AGE={age}: {result['req_per_s']} req/s",
                      flush=True)  # fmt: skip
        described = env.describe()
    finally:
        env.drop("loadtest_throughput")
    summary = {"args": {k: str(v) for k, v in vars(args).items()}, "runs": runs, **described}
    text = markdown(summary, ages, args)
    report.write(summary, out, "throughput", text)
    print(text)
    return 0


def markdown(summary: dict[str, Any], ages: list[int | None], args: argparse.Namespace) -> str:
    machine = summary["machine"]
    lines = [
        "# The example shop's orders per second by CONN_MAX_AGE",
        "",
        f"gunicorn with {args.web_workers} `sync` workers, `runqueueworker --concurrency 2` "
        f"running, {args.clients} clients placing orders as fast as they are answered (a new "
        f"HTTP connection per request), {args.seconds:g} s measured per run after a "
        f"{WARM_UP:g}-s warm-up, {args.rounds} rounds with the values taking turns. "
        f"{machine['cpus']} CPUs, PostgreSQL {summary['postgresql']['server_version']}.",
        *args.note,
        "",
        "| CONN_MAX_AGE | req/s (median) | runs | p50 ms | p99 ms | web connections (most) |",
        "|---|---:|---|---:|---:|---:|",
    ]
    medians = {}
    for age in ages:
        runs = summary["runs"][str(age)]
        medians[str(age)] = median = statistics.median(r["req_per_s"] for r in runs)
        lines.append(
            f"| {age} | {median:,.0f} | {', '.join(f'{r["req_per_s"]:,.0f}' for r in runs)} "
            f"| {statistics.median(r['p50_ms'] or 0 for r in runs):,.0f} "
            f"| {statistics.median(r['p99_ms'] or 0 for r in runs):,.0f} "
            f"| {max(r['max_connections'].get('shop-web', 0) for r in runs)} |"
        )
    if len(ages) == 2 and medians[str(ages[0])]:
        ratio = medians[str(ages[1])] / medians[str(ages[0])]
        lines += ["", f"CONN_MAX_AGE={ages[1]} serves {ratio:.1f}x the orders of {ages[0]}."]
    return "\n".join([*lines, ""])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
