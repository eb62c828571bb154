"""Streaming consume: each micro-batch leases, the batch's commit acks (dbqueue.spark.stream).
The queries and their Parquet sink: tests.spark.streams."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming.datasource import ReadMaxRows

from dbqueue import (
    QueueOptions,
    QueueSpec,
    SplitQueue,
)
from dbqueue.discovery import FoundQueue
from dbqueue.drivers import executor_for
from dbqueue.spark import stream as stream_module
from dbqueue.spark.stream import QueueStream, to_runs, to_tokens
from dbqueue.spark.types import read_schema
from dbqueue.upkeep import compaction
from tests.spark.conftest import SPARK
from tests.spark.streams import (
    DIALECT,
    FIELDS,
    counts,
    delivered,
    drain,
    push,
    start,
    stream,
    to_parquet,
)

pytestmark = SPARK


def test_runs_compress_tokens_and_expand_back() -> None:
    tokens = [(5, 1), (3, 1), (4, 1), (9, 2), (10, 2), (11, 1)]
    runs = to_runs(tokens)
    assert runs == [[3, 5, 1], [9, 10, 2], [11, 11, 1]]
    assert to_tokens(runs) == sorted(tokens)
    assert to_runs([]) == [] and to_tokens([]) == []


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
    """A stream may be a queue's only consumer: its driver runs the queue's upkeep
    (dbqueue.upkeep) as a worker would, at the batches it plans. While a long transaction holds
    the xmin horizon, the tables grow by the versions it keeps (no rewrite may give those
    back); once it ends, a batch's upkeep rewrites them (a new file) back to their size.
    Driven here as Spark drives it: plan a batch, commit the one before."""
    monkeypatch.setattr(stream_module, "CHECK_EVERY", 0.0)  # a look at every batch
    monkeypatch.setattr(compaction, "MIN_GROWTH", 64 * 1024)  # a test queue's growth
    monkeypatch.setattr(compaction, "RETRY_FIRST", 0.0)  # skipped under the hold: retry at once
    core, ex = SplitQueue(split, DIALECT), executor_for(DIALECT, spark_conn)
    reader = QueueStream(spark_dsn, FoundQueue(split), read_schema(split), 100,
                         dt.timedelta(minutes=1), 1, dt.timedelta(minutes=1))  # fmt: skip
    offset: dict[str, Any] = reader.initialOffset()

    def drain() -> int:
        nonlocal offset
        taken = 0
        while (end := reader.latestOffset(offset, ReadMaxRows(100))) != offset:
            taken += len(to_tokens(end["runs"]))
            reader.commit(end)
            offset = end
        return taken

    holder = psycopg.connect(spark_dsn, autocommit=True)
    holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    holder.execute("SELECT count(*) FROM pg_class")  # the snapshot: vacuum can free nothing
    try:
        empty = compaction.size(core, ex)
        push(spark_conn, split, range(5000))
        taken = drain()
        grown = compaction.size(core, ex)
        held = spark_conn.execute(FILENODE, (split.meta_table,)).fetchone()
    finally:
        holder.close()
    try:
        assert taken == 5000 and counts(spark_conn, split) == {}
        assert grown > 4 * empty  # what the held snapshot may still read stays
        deadline = time.monotonic() + 60  # a generous bound: the rounds wait for nothing
        n = 5000
        while spark_conn.execute(FILENODE, (split.meta_table,)).fetchone() == held:
            assert time.monotonic() < deadline, "the tables were never rewritten"
            push(spark_conn, split, range(n, n + 10))
            n += 10
            assert drain() == 10
            time.sleep(0.05)
        assert compaction.size(core, ex) < grown / 2
    finally:
        reader.stop()
