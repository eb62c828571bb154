"""Helpers of the streaming tests: queues of numbered messages, queries writing each
micro-batch to Parquet under ``out/batch=<id>`` with mode overwrite (foreachBatch, idempotent
per batch id: the usual exactly-once sink; a batch Spark replays rewrites its own folder), and
what the sink and the queue hold afterwards."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from dbqueue import Field, FieldKind, QueueOptions, QueueSpec, RingQueue, SplitQueue, get_dialect
from dbqueue.drivers import executor_for

DIALECT = get_dialect("postgresql")
FIELDS = (Field("n", FieldKind.BIGINT), Field("body", FieldKind.TEXT))


@pytest.fixture
def split(make_queue: Callable[[QueueSpec], QueueSpec], table_name: str) -> QueueSpec:
    return make_queue(QueueSpec(table_name, FIELDS))


@pytest.fixture
def ring(make_queue: Callable[[QueueSpec], QueueSpec], table_name: str) -> QueueSpec:
    # A producer waits for free slots as long as the stream needs to free them.
    options = QueueOptions(capacity=2000, push_timeout=dt.timedelta(minutes=5))
    return make_queue(QueueSpec(table_name, FIELDS, options))


def push(conn: psycopg.Connection[Any], spec: QueueSpec, numbers: range) -> None:
    """Push one message per number through the core (n, and a body naming it)."""
    layout = RingQueue if spec.options.capacity is not None else SplitQueue
    rows = [{"n": n, "body": f"b{n}"} for n in numbers]
    layout(spec, DIALECT).push_many(executor_for(DIALECT, conn), rows)


def stream(spark: SparkSession, dsn: str, table: str, **options: str) -> DataFrame:
    reader = spark.readStream.format("dbqueue").option("url", dsn).option("queue", table)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def to_parquet(out: Path, fail_at: int | None = None) -> Callable[[DataFrame, int], None]:
    """A foreachBatch function writing batch ``b`` to ``out/batch=b``; with ``fail_at``, it
    raises instead of writing that batch (a failed query, its batch not committed)."""

    def sink(batch: DataFrame, batch_id: int) -> None:
        if batch_id == fail_at:
            raise RuntimeError(f"sink failure on purpose at batch {batch_id}")
        batch.select("id", "n", "body", "attempts").write.mode("overwrite").parquet(
            str(out / f"batch={batch_id}")
        )

    return sink


def start(df: DataFrame, checkpoint: str, sink: Callable[[DataFrame, int], None]) -> StreamingQuery:
    return (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="100 milliseconds")
        .start()
    )


def drain(df: DataFrame, checkpoint: str, sink: Callable[[DataFrame, int], None]) -> None:
    """Run the query until it has processed everything available, then stop it."""
    query = start(df, checkpoint, sink)
    try:
        query.processAllAvailable()
    finally:
        query.stop()


def delivered(spark: SparkSession, out: Path) -> list[tuple[int, int]]:
    """(batch, n) of every row the sink wrote."""
    if not out.exists():
        return []
    rows = spark.read.parquet(str(out)).select("batch", "n").collect()
    return sorted((int(r["batch"]), int(r["n"])) for r in rows)


def counts(conn: psycopg.Connection[Any], spec: QueueSpec) -> dict[str, int]:
    """The queue's items by state (split: its meta table; ring: its slots)."""
    if spec.options.capacity is not None:
        sql = f'SELECT state, count(*) FROM "{spec.table}" WHERE state > 0 GROUP BY state'
        names = {1: "ready", 2: "leased"}
    else:
        sql = f'SELECT state, count(*) FROM "{spec.meta_table}" GROUP BY state'
        names = {0: "ready", 1: "leased", 2: "done", 3: "failed"}
    return {names.get(s, str(s)): int(c) for s, c in conn.execute(sql).fetchall()}


#: The triggers a query runs with, by the name the tests use.
TRIGGERS = ("processingTime", "availableNow", "once")


def run_query(
    df: DataFrame, checkpoint: str, sink: Callable[[DataFrame, int], None], trigger: str
) -> StreamingQuery:
    """Run a query with ``trigger`` until it is done: processingTime until it processed all
    that is available, then stopped; availableNow and once until they stop themselves."""
    if trigger == "processingTime":
        query = start(df, checkpoint, sink)
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        return query
    writer = df.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
    if trigger == "availableNow":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(once=True)
    query = writer.start()
    query.awaitTermination()
    return query


def batch_sizes(rows: list[tuple[int, int]]) -> list[int]:
    """How many rows each batch delivered, in batch order."""
    return [sum(1 for b, _ in rows if b == batch) for batch in sorted({b for b, _ in rows})]
