"""``python -m bench.loadtest [--quick] [--out DIR] [--note TEXT] ...``: the example shop under
gunicorn and load while its worker is killed, stopped and restarted and its web connections
are cut (see :mod:`bench.loadtest.scenario`); writes ``loadtest.md`` and ``loadtest.json`` to
the output folder and exits 1 if a check failed.

The database is ``DBQUEUE_BENCH_DSN``'s server (a database ``<prefix>_loadtest`` made afresh),
else an embedded PostgreSQL started for the run, as for ``make bench``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from bench import env as bench_env
from bench.loadtest import report, scenario
from bench.loadtest.arguments import conn_max_age, positive
from bench.loadtest.shop import ROOT, ShopConfig


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.loadtest", description=__doc__)
    p.add_argument("--quick", action="store_true", help="the short run (under a minute)")
    p.add_argument("--out", type=Path, help="report folder (default bench/results/<date>-...)")
    p.add_argument("--note", action="append", default=[], help="a line for the report's head")
    p.add_argument("--rate", type=float, help="offered orders per second")
    p.add_argument("--clients", type=positive, help="client threads")
    p.add_argument("--web-workers", type=positive, default=4, help="gunicorn --workers")
    p.add_argument("--worker-class", choices=["sync", "gthread"], default="sync")
    p.add_argument("--threads", type=positive, default=1, help="gunicorn --threads (gthread)")
    p.add_argument("--conn-max-age", type=conn_max_age, default=60)
    p.add_argument("--no-health-checks", action="store_true", help="CONN_HEALTH_CHECKS off")
    p.add_argument("--concurrency", type=positive, default=2, help="the worker's threads")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    plan = scenario.QUICK if args.quick else scenario.FULL
    plan = replace(plan, rate=args.rate or plan.rate, clients=args.clients or plan.clients)
    day = dt.date.today().isoformat()
    out = args.out or ROOT / "bench" / "results" / f"{day}-loadtest{'-quick' if args.quick else ''}"
    env = bench_env.start(quick=args.quick, sync_commit=True, scale=None)
    logs = Path(tempfile.mkdtemp(prefix="dbqueue-loadtest-"))
    config = ShopConfig(
        dsn=env.database("loadtest"),
        logs=logs,
        web_workers=args.web_workers,
        worker_class=args.worker_class,
        threads=args.threads,
        conn_max_age=args.conn_max_age,
        health_checks=not args.no_health_checks,
        worker_concurrency=args.concurrency,
    )
    started = dt.datetime.now(dt.UTC)
    try:
        result = scenario.run(plan, config, say=lambda s: print(s, flush=True))
        described = env.describe()
    finally:
        env.drop("loadtest")
    summary = {"started": started.isoformat(timespec="seconds"), **result.as_dict(), **described}
    machine, pg = described["machine"], described["postgresql"]
    notes = [
        f"Started {summary['started']}, {'quick' if args.quick else 'full'} run; "
        f"{machine['cpus']} CPUs, {machine['memory_gb']} GB, Python {machine['python']}, "
        f"PostgreSQL {pg['server_version']} ({described['server']}). Logs: `{logs}`.",
        *args.note,
    ]
    text = report.markdown(summary, "Load test of the example shop", notes)
    report.write(summary, out, "loadtest", text)
    print(text)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
