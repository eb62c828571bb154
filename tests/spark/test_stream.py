"""Streaming consume: each micro-batch leases, the batch's commit acks (dbqueue.spark.stream).

The queries write each micro-batch to Parquet under ``out/batch=<id>`` with mode overwrite
(foreachBatch, idempotent per batch id: the usual exactly-once sink): a batch Spark replays
after a failure rewrites its own folder, so the rows on disk show exactly what the stream
delivered, batch by batch.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.datasource import ReadMaxRows

from dbqueue import (
    Field,
    FieldKind,
    QueueOptions,
    QueueSpec,
    RingQueue,
    SplitQueue,
    compaction,
    get_dialect,
)
from dbqueue.discovery import FoundQueue
from dbqueue.drivers import executor_for
from dbqueue.spark import stream as stream_module
from dbqueue.spark.stream import QueueStream, to_runs, to_tokens
from dbqueue.spark.types import read_schema
from tests.spark.conftest import SPARK

pytestmark = SPARK

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


def test_runs_compress_tokens_and_expand_back() -> None:
    tokens = [(5, 1), (3, 1), (4, 1), (9, 2), (10, 2), (11, 1)]
    runs = to_runs(tokens)
    assert runs == [[3, 5, 1], [9, 10, 2], [11, 11, 1]]
    assert to_tokens(runs) == sorted(tokens)
    assert to_runs([]) == [] and to_tokens([]) == []


def test_a_stream_drains_a_split_queue_in_batches_and_acks_each(
    spark: SparkSession,
    spark_dsn: str,
    spark_conn: psycopg.Connection[Any],
    split: QueueSpec,
    checkpoint: str,
    tmp_path: Path,
) -> None:
    push(spark_conn, split, range(2500))
    out = tmp_path / "out"
    df = stream(spark, spark_dsn, split.table, maxMessagesPerBatch="1000")
    drain(df, checkpoint, to_parquet(out))
    rows = delivered(spark, out)
    assert sorted(n for _, n in rows) == list(range(2500))  # each item once
    sizes = [sum(1 for b, _ in rows if b == batch) for batch in sorted({b for b, _ in rows})]
    assert sizes == [1000, 1000, 500]
    assert counts(spark_conn, split) == {}  # all acked: the last batch too


def test_a_failed_query_restarted_from_its_checkpoint_neither_loses_nor_skips(
    spark: SparkSession,
    spark_dsn: str,
    spark_conn: psycopg.Connection[Any],
    split: QueueSpec,
    checkpoint: str,
    tmp_path: Path,
) -> None:
    push(spark_conn, split, range(3000))
    out = tmp_path / "out"
    df = stream(spark, spark_dsn, split.table, maxMessagesPerBatch="500")
    query = start(df, checkpoint, to_parquet(out, fail_at=2))
    with pytest.raises(Exception, match="sink failure on purpose at batch 2"):
        query.awaitTermination()
    # Batches 0 and 1 are written; batch 2's items stay leased (its offset is logged but
    # not committed), and nothing after it was leased.
    first = delivered(spark, out)
    assert sorted(n for _, n in first) == list(range(1000))
    assert counts(spark_conn, split)["leased"] == 500
    # The restart replays batch 2 with the same items, then goes on.
    drain(df, checkpoint, to_parquet(out))
    rows = delivered(spark, out)
    assert sorted(n for _, n in rows) == list(range(3000))  # nothing lost, nothing twice
    assert sorted(n for b, n in rows if b == 2) == list(range(1000, 1500))
    assert counts(spark_conn, split) == {}


def test_a_stopped_query_resumes_where_it_stopped(
    spark: SparkSession,
    spark_dsn: str,
    spark_conn: psycopg.Connection[Any],
    split: QueueSpec,
    checkpoint: str,
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    df = stream(spark, spark_dsn, split.table, maxMessagesPerBatch="300")
    push(spark_conn, split, range(1000))
    drain(df, checkpoint, to_parquet(out))
    # Messages pushed while no query runs wait in the queue, then the restarted query takes
    # them from its checkpoint on.
    push(spark_conn, split, range(1000, 1700))
    assert counts(spark_conn, split) == {"ready": 700}
    drain(df, checkpoint, to_parquet(out))
    assert sorted(n for _, n in delivered(spark, out)) == list(range(1700))
    assert counts(spark_conn, split) == {}


def test_a_stream_consumes_a_ring_while_a_producer_pushes(
    spark: SparkSession,
    spark_dsn: str,
    spark_conn: psycopg.Connection[Any],
    ring: QueueSpec,
    checkpoint: str,
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    df = stream(spark, spark_dsn, ring.table, maxMessagesPerBatch="700", numPartitions="3")
    query = start(df, checkpoint, to_parquet(out))

    def produce() -> None:
        # 5,000 messages through a ring of 2,000 slots: the producer waits for the stream.
        with psycopg.connect(spark_dsn, autocommit=True) as conn:
            for first in range(0, 5000, 500):
                push(conn, ring, range(first, first + 500))

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        producer.join()
        query.processAllAvailable()
    finally:
        query.stop()
    assert sorted(n for _, n in delivered(spark, out)) == list(range(5000))
    assert counts(spark_conn, ring) == {}


def test_a_stream_gives_expired_leases_back_and_keeps_done_items_when_told(
    spark: SparkSession,
    spark_dsn: str,
    spark_conn: psycopg.Connection[Any],
    make_queue: Callable[[QueueSpec], QueueSpec],
    table_name: str,
    checkpoint: str,
    tmp_path: Path,
) -> None:
    spec = make_queue(QueueSpec(table_name, FIELDS, QueueOptions(keep_done=True)))
    push(spark_conn, spec, range(400))
    # A consumer that died: 100 items leased for a moment, never acked.
    ex = executor_for(DIALECT, spark_conn)
    SplitQueue(spec, DIALECT).pop_batch(ex, 100, lease=dt.timedelta(milliseconds=50))
    time.sleep(0.2)
    out = tmp_path / "out"
    df = stream(spark, spark_dsn, spec.table, maxMessagesPerBatch="250", keepDone="true")
    drain(df, checkpoint, to_parquet(out))
    assert sorted(n for _, n in delivered(spark, out)) == list(range(400))
    assert counts(spark_conn, spec) == {"done": 400}


def test_keep_done_on_a_ring_is_refused(
    spark: SparkSession, spark_dsn: str, ring: QueueSpec
) -> None:
    with pytest.raises(Exception, match="keep_done is an option of split queues only"):
        stream(spark, spark_dsn, ring.table, keepDone="true").schema  # noqa: B018


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("maxMessagesPerBatch", "0"),
        ("leaseSeconds", "soon"),
        ("numPartitions", "-1"),
        ("rescueSeconds", "0"),
        ("maxAttempts", "0"),
        ("keepDone", "yes"),
    ],
)
def test_bad_stream_options_are_refused(
    spark: SparkSession, spark_dsn: str, split: QueueSpec, option: str, value: str
) -> None:
    with pytest.raises(Exception, match=f"option {option} must be "):
        # Options the queue's description needs fail at load(); the stream's own when the
        # query makes its source, on Spark's side: in start() or as the query's failure.
        df = stream(spark, spark_dsn, split.table, **{option: value})
        query = df.writeStream.format("noop").start()
        try:
            query.awaitTermination(120)
        finally:
            query.stop()


FILENODE = "SELECT pg_relation_filenode(%s::regclass)"


def test_a_stream_compacts_the_queue_it_alone_consumes(
    spark_dsn: str,
    spark_conn: psycopg.Connection[Any],
    split: QueueSpec,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stream may be a queue's only consumer: while a long transaction holds the xmin
    horizon, its driver compacts the tables as a worker would (dbqueue.compaction), at each
    batch it plans. Driven here as Spark drives it: plan a batch, commit the one before."""
    monkeypatch.setattr(stream_module, "CHECK_EVERY", 0.0)  # a look at every batch
    core, ex = SplitQueue(split, DIALECT), executor_for(DIALECT, spark_conn)
    reader = QueueStream(spark_dsn, FoundQueue(split), read_schema(split), 100,
                         dt.timedelta(minutes=1), 1, dt.timedelta(minutes=1))  # fmt: skip
    holder = psycopg.connect(spark_dsn, autocommit=True)
    holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    holder.execute("SELECT count(*) FROM pg_class")  # the snapshot: vacuum can free nothing
    try:
        push(spark_conn, split, range(5000))
        full = compaction.size(core, ex)  # 5,000 live messages
        before = spark_conn.execute(FILENODE, (split.meta_table,)).fetchone()
        offset, taken = reader.initialOffset(), 0
        while (end := reader.latestOffset(offset, ReadMaxRows(100))) != offset:
            taken += len(to_tokens(end["runs"]))
            reader.commit(end)
            offset = end
        drained = compaction.size(core, ex)
        after = spark_conn.execute(FILENODE, (split.meta_table,)).fetchone()
    finally:
        holder.close()
        reader.stop()
    assert taken == 5000 and counts(spark_conn, split) == {}
    # The stream rewrote the tables (a new file), and they never doubled over their live size
    # (the leases and acks add at least as much in dead versions as the messages themselves).
    assert before != after
    assert drained < 2 * full
