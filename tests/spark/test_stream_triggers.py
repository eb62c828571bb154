"""Every trigger drains what was ready, acknowledges every batch it delivered, and a restart
delivers again only the batch that was cut (dbqueue.spark.stream). Sinks: tests.spark.streams."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.sql import DataFrame, SparkSession

from dbqueue import QueueSpec
from tests.spark.conftest import SPARK
from tests.spark.streams import (
    TRIGGERS,
    batch_sizes,
    counts,
    delivered,
    drain,
    push,
    run_query,
    stream,
    to_parquet,
)

pytestmark = SPARK

ROOT = Path(__file__).resolve().parents[2]

#: Per layout: the backlog pushed and the batch size (a ring of 2,000 slots holds 1,800).
SIZES = {"split": (2500, 1000), "ring": (1800, 700)}


@pytest.fixture(params=["split", "ring"])
def layout(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def queue(layout: str, request: pytest.FixtureRequest) -> QueueSpec:
    spec: QueueSpec = request.getfixturevalue(layout)
    return spec


@pytest.mark.parametrize("trigger", TRIGGERS)
def test_each_trigger_drains_a_backlog_larger_than_a_batch_exactly_once(
    spark: SparkSession,
    spark_dsn: str,
    spark_conn: psycopg.Connection[Any],
    queue: QueueSpec,
    layout: str,
    trigger: str,
    checkpoint: str,
    tmp_path: Path,
) -> None:
    total, per_batch = SIZES[layout]
    push(spark_conn, queue, range(total))
    out = tmp_path / "out"
    df = stream(spark, spark_dsn, queue.table, maxMessagesPerBatch=str(per_batch))
    run_query(df, checkpoint, to_parquet(out), trigger)
    rows = delivered(spark, out)
    assert sorted(n for _, n in rows) == list(range(total))  # every item, once
    if trigger == "once":
        # Spark runs one batch of everything available and never looks again: the batch is
        # acknowledged when the query next starts, before it leases anything.
        assert batch_sizes(rows) == [total]
        assert counts(spark_conn, queue) == {"leased": total}
        run_query(df, checkpoint, to_parquet(out), trigger)
        assert sorted(n for _, n in delivered(spark, out)) == list(range(total))
    else:
        full, rest = divmod(total, per_batch)
        assert batch_sizes(rows) == [per_batch] * full + [rest]
    assert counts(spark_conn, queue) == {}  # nothing left leased


@pytest.mark.parametrize("trigger", ["availableNow", "once"])
def test_items_pushed_during_a_run_wait_for_the_next_run(
    spark: SparkSession,
    spark_dsn: str,
    spark_conn: psycopg.Connection[Any],
    queue: QueueSpec,
    trigger: str,
    checkpoint: str,
    tmp_path: Path,
) -> None:
    """A daily job: each run takes what was ready when it started, each item exactly once
    over the runs, nothing left leased by an available-now run."""
    push(spark_conn, queue, range(1500))
    out = tmp_path / "out"
    write = to_parquet(out)

    def sink(batch: DataFrame, batch_id: int) -> None:
        if batch_id == 0:  # a producer goes on while the first run works
            with psycopg.connect(spark_dsn, autocommit=True) as conn:
                push(conn, queue, range(1500, 1800))
        write(batch, batch_id)

    df = stream(spark, spark_dsn, queue.table, maxMessagesPerBatch="600")
    run_query(df, checkpoint, sink, trigger)
    first = delivered(spark, out)
    assert sorted(n for _, n in first) == list(range(1500))
    left = counts(spark_conn, queue)
    assert left.get("ready") == 300
    assert left.get("leased", 0) == (1500 if trigger == "once" else 0)
    run_query(df, checkpoint, write, trigger)  # the next day
    rows = delivered(spark, out)
    assert sorted(n for _, n in rows) == list(range(1800))  # no duplicate on the second run
    assert counts(spark_conn, queue) == ({"leased": 300} if trigger == "once" else {})


def test_an_available_now_run_on_an_empty_queue_stops_at_once(
    spark: SparkSession, spark_dsn: str, split: QueueSpec, checkpoint: str, tmp_path: Path
) -> None:
    df = stream(spark, spark_dsn, split.table)
    query = run_query(df, checkpoint, to_parquet(tmp_path / "out"), "availableNow")
    assert query.exception() is None
    assert delivered(spark, tmp_path / "out") == []


def test_the_source_reports_its_counters_in_the_query_progress(
    spark: SparkSession,
    spark_dsn: str,
    spark_conn: psycopg.Connection[Any],
    split: QueueSpec,
    checkpoint: str,
    tmp_path: Path,
) -> None:
    push(spark_conn, split, range(2500))
    df = stream(spark, spark_dsn, split.table, maxMessagesPerBatch="1000")
    query = run_query(df, checkpoint, to_parquet(tmp_path / "out"), "availableNow")
    reports = [
        (p["numInputRows"], json.loads(p["sources"][0]["latestOffset"]))
        for p in query.recentProgress
    ]
    assert [rows for rows, _ in reports] == [1000, 1000, 500]
    assert [r["leased"] for _, r in reports] == [1000, 1000, 500]
    # Counted when each batch was planned: what was still ready after its lease.
    assert [r["backlog"] for _, r in reports] == [1500, 500, 0]
    # Acknowledged through the batch before it: the last one by the run's last look.
    assert [r["acked"] for _, r in reports] == [0, 1000, 2000]
    assert [r["inFlight"] for _, r in reports] == [1000, 1000, 500]
    assert counts(spark_conn, split) == {}


JOB = """
import os, sys, time
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession
from dbqueue.spark import register
dsn, table, checkpoint, out, marker = sys.argv[1:6]
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
register(spark)
df = (spark.readStream.format("dbqueue").option("url", dsn).option("queue", table)
      .option("maxMessagesPerBatch", "400").load())
def sink(batch, batch_id):
    batch.select("id", "n").write.mode("append").parquet(f"{out}/batch={batch_id}")
    if batch_id == 2:  # written, not committed: the driver is killed now
        open(marker, "w").close()
        time.sleep(600)
(df.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
   .trigger(processingTime="100 milliseconds").start().awaitTermination())
"""


@pytest.mark.slow
def test_a_driver_killed_mid_batch_redelivers_only_that_batch_on_restart(
    spark: SparkSession,
    spark_dsn: str,
    spark_conn: psycopg.Connection[Any],
    split: QueueSpec,
    checkpoint: str,
    tmp_path: Path,
) -> None:
    """SIGKILL to a driver (its JVM and Python workers with it) while its sink is in the middle
    of batch 2: restarted from the checkpoint, the query replays batch 2 (its items again, an
    append-only sink shows them twice), then goes on; nothing is lost, nothing else doubled."""
    push(spark_conn, split, range(2000))
    out, marker = tmp_path / "out", tmp_path / "killed-here"
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    job = subprocess.Popen(
        [sys.executable, "-c", JOB, spark_dsn, split.table, checkpoint, str(out), str(marker)],
        env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while not marker.exists():
            assert job.poll() is None, job.stderr.read().decode()[-3000:] if job.stderr else ""
            assert time.monotonic() < deadline, "the job never reached batch 2"
            time.sleep(0.2)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    assert counts(spark_conn, split)["leased"] == 400  # batch 2's, never acknowledged

    def append(batch: DataFrame, batch_id: int) -> None:
        batch.select("id", "n").write.mode("append").parquet(str(out / f"batch={batch_id}"))

    df = stream(spark, spark_dsn, split.table, maxMessagesPerBatch="400")
    drain(df, checkpoint, append)
    rows = delivered(spark, out)
    numbers = [n for _, n in rows]
    assert sorted(set(numbers)) == list(range(2000))  # nothing lost
    twice = sorted(n for n in set(numbers) if numbers.count(n) > 1)
    assert twice == list(range(800, 1200))  # batch 2's items, and only those
    assert all(b == 2 for b, n in rows if n in set(twice))
    assert counts(spark_conn, split) == {}


@pytest.mark.parametrize("trigger", ["processingTime", "availableNow"])
def test_a_failed_batch_is_replayed_on_restart_on_either_layout(
    spark: SparkSession,
    spark_dsn: str,
    spark_conn: psycopg.Connection[Any],
    queue: QueueSpec,
    trigger: str,
    checkpoint: str,
    tmp_path: Path,
) -> None:
    push(spark_conn, queue, range(1500))
    out = tmp_path / "out"
    df = stream(spark, spark_dsn, queue.table, maxMessagesPerBatch="500")
    with pytest.raises(Exception, match="sink failure on purpose at batch 1"):
        run_query(df, checkpoint, to_parquet(out, fail_at=1), trigger)
    assert counts(spark_conn, queue).get("leased") == 500  # batch 1's, not acknowledged
    run_query(df, checkpoint, to_parquet(out), trigger)
    rows = delivered(spark, out)
    assert sorted(n for _, n in rows) == list(range(1500))  # nothing lost, nothing twice
    assert sorted(n for b, n in rows if b == 1) == list(range(500, 1000))  # the same items
    assert counts(spark_conn, queue) == {}
