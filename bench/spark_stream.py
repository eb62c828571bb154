"""``python -m bench.spark_stream``: draining a queue with ``spark.readStream``, per trigger.

One run, one database: ``--rows`` messages (``n`` bigint, ``body`` ~50 characters) are pushed
into a fresh split queue (and ``--ring-rows`` into a ring of ``--ring-capacity`` slots), then a
streaming query drains them into Spark's ``noop`` sink with ``maxMessagesPerBatch`` =
``--batch``, once per trigger:

* ``processingTime`` (100 ms), run until ``processAllAvailable()`` returns, then stopped;
* ``availableNow``, run until it stops itself (everything ready at its start);
* ``once``: one batch of everything (its batch stays leased until the next start).

Each figure is the median of ``--repeat`` runs, after an unreported warm-up query that pays
for the JVM's start. The report gives items/s over the whole query (start to stop: planning,
reading, the sink and the acks), the batches, and the slowest batch's duration from Spark's
progress reports.

The server: ``DBQUEUE_BENCH_DSN`` or an embedded PostgreSQL (bench.env). Output:
``bench/results/<date>-spark-stream/report.md`` and ``results.json``.
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
from bench.spark_push import FIELDS, push_many, recreate
from dbqueue import QueueOptions, QueueSpec
from dbqueue.spark.archive_command import spark_session

RESULTS = Path(__file__).resolve().parent / "results"
TRIGGERS = ("processingTime", "availableNow", "once")


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.spark_stream", description=__doc__)
    p.add_argument("--rows", type=int, default=200_000, help="messages per split-queue run")
    p.add_argument("--ring-rows", type=int, default=100_000, help="messages per ring run")
    p.add_argument("--ring-capacity", type=int, default=131_072, help="the ring's slots")
    p.add_argument("--batch", type=int, default=10_000, help="maxMessagesPerBatch")
    p.add_argument("--repeat", type=int, default=3, help="runs per trigger (median)")
    p.add_argument("--master", default="local[*]", help="Spark master")
    p.add_argument("--out", type=Path, help="output folder (default bench/results/<date>-...)")
    return p.parse_args(argv)


def drain(spark: Any, dsn: str, spec: QueueSpec, batch: int, trigger: str) -> dict[str, Any]:
    """Run one query with ``trigger`` over the queue; its seconds, batches and slowest batch."""
    df = (
        spark.readStream.format("dbqueue")
        .option("url", dsn)
        .option("queue", spec.table)
        .option("maxMessagesPerBatch", str(batch))
        .load()
    )
    with tempfile.TemporaryDirectory(prefix="dbqueue-stream-bench-") as checkpoint:
        writer = df.writeStream.format("noop").option("checkpointLocation", checkpoint)
        began = time.perf_counter()
        if trigger == "processingTime":
            query = writer.trigger(processingTime="100 milliseconds").start()
            query.processAllAvailable()
            query.stop()
        else:
            query = writer.trigger(**{trigger: True}).start()
            query.awaitTermination()
        took = time.perf_counter() - began
        batches = [p for p in query.recentProgress if p["numInputRows"]]
    return {
        "seconds": took,
        "items": sum(int(p["numInputRows"]) for p in batches),
        "batches": len(batches),
        "slowest_batch_ms": max((int(p["durationMs"]["triggerExecution"]) for p in batches),
                                default=0),
    }  # fmt: skip


def queues(args: argparse.Namespace) -> list[tuple[QueueSpec, int]]:
    ring = QueueOptions(capacity=args.ring_capacity, push_timeout=dt.timedelta(minutes=5))
    return [
        (QueueSpec("bench_stream_split", FIELDS), args.rows),
        (QueueSpec("bench_stream_ring", FIELDS, ring), args.ring_rows),
    ]


def report(args: argparse.Namespace, runs: dict[str, list[dict[str, Any]]], env: Any) -> str:
    lines = [
        f"# Spark streaming drain per trigger ({dt.date.today().isoformat()})",
        "",
        f"`python -m bench.spark_stream` — Spark master `{args.master}`, maxMessagesPerBatch "
        f"{args.batch:,}, noop sink, median of {args.repeat} runs after a warm-up query. "
        "items/s: the queue's items over the whole query, start to stop.",
        "",
        "| queue | trigger | items | batches | seconds | items/s | slowest batch |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, results in runs.items():
        queue, trigger = name.split(" / ")
        median = statistics.median(r["seconds"] for r in results)
        items = results[0]["items"]
        slowest = max(r["slowest_batch_ms"] for r in results)
        lines.append(
            f"| {queue} | {trigger} | {items:,} | {results[0]['batches']} | {median:.1f} | "
            f"{items / median:,.0f} | {slowest:,} ms |"
        )
    lines += ["", "```", json.dumps(env.describe(), indent=1), "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    args = parse(argv)
    env = bench_env.start(quick=False, sync_commit=True, scale=None)
    dsn = env.database("spark_stream")
    runs: dict[str, list[dict[str, Any]]] = {}
    with spark_session(args.master, app="dbqueue-stream-bench") as spark:
        spark.sparkContext.setLogLevel("ERROR")
        warm = queues(args)[0][0]
        recreate(dsn, warm)
        push_many(dsn, warm, 20_000, 1_000)
        drain(spark, dsn, warm, args.batch, "availableNow")  # the JVM's start and first jobs
        for _ in range(args.repeat):
            for spec, rows in queues(args):
                layout = "ring" if spec.options.capacity else "split"
                for trigger in TRIGGERS:
                    recreate(dsn, spec)
                    push_many(dsn, spec, rows, 1_000)
                    with psycopg.connect(dsn, autocommit=True) as conn:
                        conn.execute("VACUUM ANALYZE")
                    result = drain(spark, dsn, spec, args.batch, trigger)
                    assert result["items"] == rows, (layout, trigger, result)
                    runs.setdefault(f"{layout} / {trigger}", []).append(result)
                    rate = rows / result["seconds"]
                    print(f"{layout} {trigger}: {rate:,.0f} items/s", file=sys.stderr, flush=True)
    text = report(args, runs, env)
    out = args.out or RESULTS / f"{dt.date.today().isoformat()}-spark-stream"
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(text)
    (out / "results.json").write_text(json.dumps(runs, indent=1))
    env.drop("spark_stream")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
