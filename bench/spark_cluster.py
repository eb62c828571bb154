"""``python -m bench.spark_cluster``: the data source on a standalone cluster vs local mode.

On one machine, the same two jobs run twice: in local mode (``local[2]``: the tasks are threads
of the driver's JVM) and on a standalone cluster of a master and two workers
(bench/spark_standalone.py: one executor of 1 core per worker, each a JVM of its own, so every
task's rows cross from an executor process, and every task opens its own connection):

* **write**: ``df.write.format("dbqueue")`` of ``--rows`` rows (``n`` bigint, ``body`` ~50
  characters) in ``--partitions`` partitions into a fresh split queue;
* **drain**: ``readStream`` of that queue with ``maxMessagesPerBatch=--per-batch`` into a
  foreachBatch Parquet sink, until the queue is empty: under ``--trigger availableNow`` the
  query ends by itself; under ``--trigger processingTime`` (100 ms) it runs until
  ``processAllAvailable`` returns, then stops.

Each figure is the median of ``--repeat`` runs, after an unreported warm-up write and drain per
mode (the session's start, the first jobs, the executors' Python workers). After each drain the
queue must be empty and the sink must hold every row once; a run that leaves items behind is
reported as such. The server: ``DBQUEUE_BENCH_DSN`` or an embedded PostgreSQL (bench.env).
Output: ``bench/results/<date>-spark-cluster/report.md`` and ``results.json``.
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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from bench import env as bench_env
from bench.spark_standalone import session_config, standalone_cluster, wait_for_executors
from dbqueue import Field, FieldKind, QueueSpec, get_dialect
from dbqueue.schema import create_statements

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
DIALECT = get_dialect("postgresql")
FIELDS = (Field("n", FieldKind.BIGINT), Field("body", FieldKind.TEXT))
BODY = "message body of about fifty characters, number "
SPEC = QueueSpec("bench_spark_cluster", FIELDS)
MODES = ("local[2]", "standalone cluster")


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.spark_cluster", description=__doc__)
    p.add_argument("--rows", type=int, default=200_000, help="rows written, then drained")
    p.add_argument("--partitions", type=int, default=4, help="the written DataFrame's partitions")
    p.add_argument("--per-batch", type=int, default=10_000, help="maxMessagesPerBatch")
    p.add_argument(
        "--trigger",
        choices=("availableNow", "processingTime"),
        default="availableNow",
        help="the drain's trigger (processingTime: 100 ms, then processAllAvailable)",
    )
    p.add_argument("--repeat", type=int, default=3, help="runs per mode and job (median)")
    p.add_argument("--out", type=Path, help="output folder (default bench/results/<date>-...)")
    return p.parse_args(argv)


def recreate(dsn: str) -> None:
    q = DIALECT.quote
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {q(SPEC.table)}, {q(SPEC.meta_table)}")
        conn.execute(f"DROP TABLE IF EXISTS {q(SPEC.stage_table)}")
        for statement in create_statements(SPEC, DIALECT):
            conn.execute(statement)


def queued(dsn: str) -> int:
    """Items in the queue, whatever their state."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(f"SELECT count(*) FROM {DIALECT.quote(SPEC.meta_table)}").fetchone()
    assert row is not None
    return int(row[0])


def write(spark: Any, dsn: str, rows: int, partitions: int) -> float:
    """Seconds to write ``rows`` rows into the fresh queue."""
    from pyspark.sql import functions as sf

    recreate(dsn)
    body = sf.concat(sf.lit(BODY), sf.col("id").cast("string"))
    df = spark.range(0, rows, 1, partitions).select(sf.col("id").alias("n"), body.alias("body"))
    started = time.perf_counter()
    df.write.format("dbqueue").option("url", dsn).option("queue", SPEC.table).mode("append").save()
    took = time.perf_counter() - started
    assert queued(dsn) == rows, "the write did not publish every row"
    return took


def drain(spark: Any, dsn: str, rows: int, per_batch: int, trigger: str, folder: Path) -> float:
    """Seconds to drain the queue into Parquet; checks that every row arrived once and that
    the queue is empty."""
    out, checkpoint = folder / "out", folder / "checkpoint"

    def sink(batch: Any, batch_id: int) -> None:
        batch.select("id", "n").write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))

    df = (
        spark.readStream.format("dbqueue")
        .option("url", dsn)
        .option("queue", SPEC.table)
        .option("maxMessagesPerBatch", str(per_batch))
        .option("numPartitions", "2")
        .load()
    )
    writer = df.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
    started = time.perf_counter()
    if trigger == "availableNow":
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
    else:
        query = writer.trigger(processingTime="100 milliseconds").start()
        query.processAllAvailable()
        query.stop()
    took = time.perf_counter() - started
    left = queued(dsn)
    got = spark.read.parquet(str(out)).select("n").distinct().count() if out.exists() else 0
    if left or got != rows:
        raise RuntimeError(f"the {trigger} drain left {left} item(s), delivered {got} of {rows}")
    return took


@contextmanager
def session(mode: str, folder: Path) -> Iterator[Any]:
    """A SparkSession of ``mode``, the ``dbqueue`` source registered; stopped at the end (and
    the cluster with it)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from dbqueue.spark import register

    def build(config: dict[str, str]) -> Any:
        builder = SparkSession.builder.appName("dbqueue-cluster-bench")
        for key, value in {
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "4",
            "spark.driver.memory": "1g",
            **config,
        }.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        return spark

    if mode == "local[2]":
        spark = build({"spark.master": "local[2]"})
        try:
            yield spark
        finally:
            spark.stop()
        return
    with standalone_cluster(folder / "cluster", environ={"PYTHONPATH": str(ROOT)}) as cluster:
        spark = build(session_config(cluster.url, sys.executable, str(ROOT)))
        try:
            wait_for_executors(spark, 2)
            yield spark
        finally:
            spark.stop()


def measure(args: argparse.Namespace, dsn: str) -> dict[str, dict[str, list[float]]]:
    """mode -> job -> seconds of each run."""
    seconds: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="dbqueue-spark-cluster-") as tmp:
        for mode in MODES:
            # No "[2]" in a path: Spark reads it as a glob.
            folder = Path(tmp) / ("local" if mode.startswith("local") else "cluster")
            with session(mode, folder) as spark:
                write(spark, dsn, 20_000, args.partitions)  # warm-up
                drain(spark, dsn, 20_000, args.per_batch, args.trigger, folder / "warm")
                runs: dict[str, list[float]] = {"write": [], "drain": []}
                for i in range(args.repeat):
                    runs["write"].append(write(spark, dsn, args.rows, args.partitions))
                    runs["drain"].append(
                        drain(spark, dsn, args.rows, args.per_batch, args.trigger,
                              folder / f"run-{i}")
                    )  # fmt: skip
                    took = f"write {runs['write'][-1]:.1f} s, drain {runs['drain'][-1]:.1f} s"
                    print(f"{mode}: run {i + 1}: {took}", file=sys.stderr, flush=True)
                seconds[mode] = runs
    return seconds


def report(args: argparse.Namespace, seconds: dict[str, dict[str, list[float]]], env: Any) -> str:
    trigger = (
        "availableNow"
        if args.trigger == "availableNow"
        else "processingTime 100 ms, then processAllAvailable"
    )
    lines = [
        f"# The data source on a standalone cluster vs local mode, {args.rows:,} rows",
        "",
        f"One machine ({os.cpu_count()} cores). Local mode: `local[2]`. Cluster: a master and "
        f"two workers from the installed PySpark, one executor of 1 core and 1 GB per worker. "
        f"Write: `df.write` of {args.rows:,} rows in {args.partitions} partitions into a fresh "
        f"split queue. Drain: `readStream`, maxMessagesPerBatch={args.per_batch:,}, "
        f"numPartitions=2, trigger {trigger}, into a foreachBatch Parquet sink, until the "
        f"queue is empty. Median of {args.repeat} run(s) after a warm-up per mode.",
        "",
        "| mode | write s | write rows/s | drain s | drain items/s |",
        "|---|---:|---:|---:|---:|",
    ]
    for mode, runs in seconds.items():
        w, d = statistics.median(runs["write"]), statistics.median(runs["drain"])
        lines.append(
            f"| {mode} | {w:.1f} | {args.rows / w:,.0f} | {d:.1f} | {args.rows / d:,.0f} |"
        )
    lines += ["", "```", json.dumps(env.describe(), indent=1), "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    args = parse(argv)
    env = bench_env.start(quick=False, sync_commit=True, scale=None)
    dsn = env.database("spark_cluster")
    seconds = measure(args, dsn)
    text = report(args, seconds, env)
    out = args.out or RESULTS / f"{dt.date.today().isoformat()}-spark-cluster"
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(text)
    (out / "results.json").write_text(json.dumps({"seconds": seconds}, indent=1))
    env.drop("spark_cluster")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
