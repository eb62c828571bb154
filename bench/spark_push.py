"""``python -m bench.spark_push``: bulk push from Spark vs ``push_many`` from one process.

One run, one database: the same ``--rows`` messages (``n`` bigint, ``body`` ~50 characters)
are pushed into a fresh split queue

* by the core's ``push_many`` from this one process, one transaction per ``--batch`` rows
  (what a Python job without Spark does: build the dicts, push them batch by batch), and
* by ``df.write.format("dbqueue")`` from a DataFrame of ``--partitions`` partitions (each
  task validates its rows and COPYs them into the stage; the driver publishes the whole
  write in one statement),

and, for a ring queue of ``--ring-capacity`` slots, ``--ring-rows`` messages both ways (the
Spark write to a ring stages the same way, then publishes through the core's ring push).
Each figure is the median of ``--repeat`` runs (the systems taking turns), after an
unreported warm-up write that pays for the JVM's start. The report gives rows/s and each
Spark figure's ratio to ``push_many``.

The server: ``DBQUEUE_BENCH_DSN`` or an embedded PostgreSQL (bench.env). Output:
``bench/results/<date>-spark-push/report.md`` and ``results.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import psycopg

from bench import env as bench_env
from dbqueue import Field, FieldKind, QueueOptions, QueueSpec, RingQueue, SplitQueue, get_dialect
from dbqueue.drivers import executor_for
from dbqueue.schema import create_ring_statements, create_statements, drop_ring_statements
from dbqueue.spark.archive_command import spark_session

RESULTS = Path(__file__).resolve().parent / "results"
DIALECT = get_dialect("postgresql")
FIELDS = (Field("n", FieldKind.BIGINT), Field("body", FieldKind.TEXT))
BODY = "message body of about fifty characters, number "
#: A system's queue, its row count and a run returning its seconds.
System = tuple[QueueSpec, int, Callable[[], float]]


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.spark_push", description=__doc__)
    p.add_argument("--rows", type=int, default=1_000_000, help="messages per split-queue run")
    p.add_argument("--batch", type=int, default=1_000, help="push_many batch size")
    p.add_argument("--partitions", default="2,4", help="DataFrame partitions (comma list)")
    p.add_argument("--ring-rows", type=int, default=200_000, help="messages per ring run")
    p.add_argument("--ring-capacity", type=int, default=262_144, help="the ring's slots")
    p.add_argument("--repeat", type=int, default=3, help="runs per system (median)")
    p.add_argument("--master", default="local[*]", help="Spark master")
    p.add_argument("--out", type=Path, help="output folder (default bench/results/<date>-...)")
    return p.parse_args(argv)


def recreate(dsn: str, spec: QueueSpec) -> None:
    """The queue's tables afresh (and no stage left from an earlier write)."""
    q = DIALECT.quote
    ring = spec.options.capacity is not None
    with psycopg.connect(dsn, autocommit=True) as conn:
        if ring:
            for statement in drop_ring_statements(spec, DIALECT):
                conn.execute(statement)
        conn.execute(f"DROP TABLE IF EXISTS {q(spec.table)}, {q(spec.meta_table)}")
        conn.execute(f"DROP TABLE IF EXISTS {q(spec.stage_table)}")
        for statement in (create_ring_statements if ring else create_statements)(spec, DIALECT):
            conn.execute(statement)
        conn.execute("CHECKPOINT")


def push_many(dsn: str, spec: QueueSpec, rows: int, batch: int) -> float:
    """Seconds for the core's push_many to push ``rows`` messages, ``batch`` per transaction
    (the dicts are built in the timed loop, as a job building them from its data does)."""
    layout = RingQueue if spec.options.capacity is not None else SplitQueue
    queue = layout(spec, DIALECT)
    with psycopg.connect(dsn, autocommit=True) as conn:
        ex = executor_for(DIALECT, conn)
        began = time.monotonic()
        for first in range(0, rows, batch):
            numbers = range(first, min(first + batch, rows))
            queue.push_many(ex, [{"n": n, "body": f"{BODY}{n}"} for n in numbers])
        return time.monotonic() - began


def spark_write(spark: Any, dsn: str, spec: QueueSpec, rows: int, partitions: int) -> float:
    """Seconds for ``df.write.format("dbqueue")`` to push ``rows`` messages from a DataFrame
    of ``partitions`` partitions."""
    from pyspark.sql import functions as sf

    df = spark.range(0, rows, 1, partitions).select(
        sf.col("id").alias("n"), sf.concat(sf.lit(BODY), sf.col("id").cast("string")).alias("body")
    )
    began = time.monotonic()
    df.write.format("dbqueue").option("url", dsn).option("queue", spec.table).mode("append").save()
    return time.monotonic() - began


def ready(dsn: str, spec: QueueSpec) -> int:
    """The messages waiting in the queue (each run checks it pushed them all)."""
    q = DIALECT.quote
    sql = (
        f"SELECT count(*) FROM {q(spec.table)} WHERE state = 1"
        if spec.options.capacity is not None
        else f"SELECT count(*) FROM {q(spec.meta_table)} WHERE state = 0"
    )
    with psycopg.connect(dsn) as conn:
        row = conn.execute(sql).fetchone()
        return 0 if row is None else int(row[0])


def systems(args: argparse.Namespace, spark: Any, dsn: str) -> dict[str, System]:
    """name -> (queue, rows, a run returning its seconds)."""
    split = QueueSpec("bench_spark_push", FIELDS)
    ring = QueueSpec(
        "bench_spark_push_ring",
        FIELDS,
        QueueOptions(capacity=args.ring_capacity, push_timeout=dt.timedelta(minutes=5)),
    )
    out: dict[str, System] = {
        f"split push_many (batch {args.batch:,})": (
            split,
            args.rows,
            lambda: push_many(dsn, split, args.rows, args.batch),
        ),
    }
    for parts in (int(p) for p in args.partitions.split(",")):
        out[f"split Spark write ({parts} partitions)"] = (
            split,
            args.rows,
            partial(spark_write, spark, dsn, split, args.rows, parts),
        )
    out[f"ring push_many (batch {args.batch:,})"] = (
        ring,
        args.ring_rows,
        lambda: push_many(dsn, ring, args.ring_rows, args.batch),
    )
    parts = int(args.partitions.split(",")[-1])
    out[f"ring Spark write ({parts} partitions)"] = (
        ring,
        args.ring_rows,
        lambda: spark_write(spark, dsn, ring, args.ring_rows, parts),
    )
    return out


def report(
    args: argparse.Namespace, seconds: dict[str, list[float]], rows: dict[str, int], env: Any
) -> str:
    rates = {name: rows[name] / statistics.median(s) for name, s in seconds.items()}
    lines = [
        f"# Bulk push: Spark write vs push_many, master {args.master}",
        "",
        f"Median of {args.repeat} run(s) per system (systems taking turns, each into a fresh "
        f"queue), after an unreported warm-up write. Ratio: rows/s over push_many's into the "
        f"same layout.",
        "",
        "| system | rows | rows/s | seconds | ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, rate in rates.items():
        layout = name.split()[0]
        base = next(r for n, r in rates.items() if n.startswith(f"{layout} push_many"))
        median = statistics.median(seconds[name])
        lines.append(
            f"| {name} | {rows[name]:,} | {rate:,.0f} | {median:.1f} | {rate / base:.2f}x |"
        )
    lines += ["", "```", json.dumps(env.describe(), indent=1), "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    args = parse(argv)
    env = bench_env.start(quick=False, sync_commit=True, scale=None)
    dsn = env.database("spark_push")
    seconds: dict[str, list[float]] = {}
    rows: dict[str, int] = {}
    with spark_session(args.master, app="dbqueue-push-bench") as spark:
        spark.sparkContext.setLogLevel("ERROR")
        runs = systems(args, spark, dsn)
        warm_spec = next(iter(runs.values()))[0]
        recreate(dsn, warm_spec)
        spark_write(spark, dsn, warm_spec, 50_000, 2)  # the JVM's start and first jobs
        for _ in range(args.repeat):
            for name, (spec, count, run) in runs.items():
                recreate(dsn, spec)
                took = run()
                assert ready(dsn, spec) == count, name
                seconds.setdefault(name, []).append(took)
                rows[name] = count
                print(f"{name}: {count / took:,.0f} rows/s", file=sys.stderr, flush=True)
    text = report(args, seconds, rows, env)
    out = args.out or RESULTS / f"{dt.date.today().isoformat()}-spark-push"
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(text)
    (out / "results.json").write_text(json.dumps({"seconds": seconds, "rows": rows}, indent=1))
    env.drop("spark_push")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
