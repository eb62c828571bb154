"""``python -m bench.spark_archive``: the archive job's rate (dbqueue.spark.archive).

A split queue is filled with ``--rows`` done items (two payload columns, ~60 bytes) finished
over ``--days`` past days, then archived to Parquet in a temporary folder with each batch size
of ``--batch-sizes``: write (Spark reads the queue through the ``dbqueue`` source and writes
Parquet), verify (count back, count the database), publish (move the files into place) and
delete (stream the ids back in order, delete in batches). Each phase's rate is rows / its
seconds; the total is rows / the whole run. After each run, the id stream alone is timed
(the ids read back from the archive to the driver, as the delete phase reads them) to split
the delete phase into Spark's part and the database's. The queue is refilled for every run;
a small first run, not reported, warms the JVM up (a cold start adds ~10 s to the first run
of a process).

The server: ``DBQUEUE_BENCH_DSN`` or an embedded PostgreSQL (bench.env). Output:
``bench/results/<date>-spark-archive/report.md`` and ``results.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from bench import env as bench_env
from dbqueue import Field, FieldKind, QueueSpec, get_dialect
from dbqueue.schema import create_statements
from dbqueue.spark.archive import archive, archived_ids
from dbqueue.spark.archive_command import spark_session

RESULTS = Path(__file__).resolve().parent / "results"
SPEC = QueueSpec("bench_archive", (Field("n", FieldKind.BIGINT), Field("body", FieldKind.TEXT)))
PHASES = ("write", "verify", "publish", "delete")


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.spark_archive", description=__doc__)
    p.add_argument("--rows", type=int, default=1_000_000, help="done items to archive per run")
    p.add_argument("--days", type=int, default=10, help="days they finished over")
    p.add_argument("--batch-sizes", default="1000,5000,20000", help="delete batch sizes")
    p.add_argument("--repeat", type=int, default=1, help="runs per batch size (median)")
    p.add_argument("--master", default="local[*]", help="Spark master")
    p.add_argument(
        "--warmup", type=int, default=20_000, help="rows of an unreported first run (JVM warm-up)"
    )
    p.add_argument("--out", type=Path, help="output folder (default bench/results/<date>-...)")
    return p.parse_args(argv)


def fill(dsn: str, rows: int, days: int) -> None:
    """The queue afresh, with ``rows`` done items finished 2 .. days + 1 days ago."""
    dialect = get_dialect("postgresql")
    q = dialect.quote
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {q(SPEC.table)}, {q(SPEC.meta_table)}")
        for statement in create_statements(SPEC, dialect):
            conn.execute(statement)
        conn.execute(
            f"INSERT INTO {q(SPEC.table)} (id, n, body, enqueued_at) "
            f"SELECT g, g, 'payload ' || g || repeat('x', 40), now() - interval '30 days' "
            f"FROM generate_series(1, %(rows)s) AS g",
            {"rows": rows},
        )
        conn.execute(
            f"INSERT INTO {q(SPEC.meta_table)} (id, state, priority, run_at, attempts) "
            f"SELECT g, 2, 0, now() - (2 + g %% %(days)s) * interval '1 day', 1 "
            f"FROM generate_series(1, %(rows)s) AS g",
            {"rows": rows, "days": days},
        )
        conn.execute(f"VACUUM ANALYZE {q(SPEC.table)}, {q(SPEC.meta_table)}")


def id_stream_seconds(spark: Any, uris: list[str]) -> float:
    """Seconds to bring the archived ids to the driver in order, as the delete phase does."""
    began = time.monotonic()
    count = sum(1 for _ in archived_ids(spark, uris))
    assert count > 0
    return time.monotonic() - began


def one_run(spark: Any, dsn: str, rows: int, days: int, batch: int) -> dict[str, float]:
    fill(dsn, rows, days)
    with tempfile.TemporaryDirectory(prefix="dbqueue-archive-bench-") as folder:
        result = archive(
            spark, dsn, SPEC.table, dt.timedelta(days=1), folder, batch_size=batch, progress=False
        )
        assert result.rows_written == result.rows_deleted == rows, result
        stream = id_stream_seconds(spark, [f"{result.root}/{f}" for f in result.files])
    figures = {"total": result.seconds, **{p: result.phases.get(p, 0.0) for p in PHASES}}
    figures["id stream (part of delete)"] = stream
    figures["files"] = len(result.files)
    return figures


def report(args: argparse.Namespace, runs: dict[int, list[dict[str, float]]], env: Any) -> str:
    lines = [
        f"# Archive job: {args.rows:,} done items, {args.days} days, master {args.master}",
        "",
        f"rows/s per phase (seconds in brackets); median of {args.repeat} run(s) per batch size "
        f"(sizes taking turns), after an unreported {args.warmup:,}-row warm-up run",
        "",
        "| batch size | total | write | verify | publish | delete | id stream | files |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for batch, figures in runs.items():
        med = {k: statistics.median(f[k] for f in figures) for k in figures[0]}
        cells = [
            f"{args.rows / med[k]:,.0f} ({med[k]:.1f} s)" if med[k] else "-"
            for k in ("total", *PHASES, "id stream (part of delete)")
        ]
        lines.append(f"| {batch:,} | {' | '.join(cells)} | {med['files']:.0f} |")
    machine = env.describe()
    lines += ["", "```", json.dumps(machine, indent=1), "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    args = parse(argv)
    env = bench_env.start(quick=False, sync_commit=True, scale=None)
    dsn = env.database("spark_archive")
    sizes = [int(s) for s in args.batch_sizes.split(",")]
    runs: dict[int, list[dict[str, float]]] = {}
    with spark_session(args.master, app="dbqueue-archive-bench") as spark:
        spark.sparkContext.setLogLevel("ERROR")
        if args.warmup:  # the first Spark jobs of a JVM pay for its start and compilation
            one_run(spark, dsn, args.warmup, args.days, sizes[0])
        for _ in range(args.repeat):
            for batch in sizes:  # sizes take turns: a drift of the machine falls on all
                figures = one_run(spark, dsn, args.rows, args.days, batch)
                runs.setdefault(batch, []).append(figures)
                print(f"batch {batch:,}: {figures}", file=sys.stderr, flush=True)
    text = report(args, runs, env)
    out = args.out or RESULTS / f"{dt.date.today().isoformat()}-spark-archive"
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(text)
    (out / "results.json").write_text(json.dumps({str(k): v for k, v in runs.items()}, indent=1))
    env.drop("spark_archive")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
