"""The data source on a Spark standalone cluster (bench/spark_standalone.py): a master and two
workers, each a JVM of its own, and an executor per worker, so that every task runs in
another process than the driver and opens its own connections to PostgreSQL, as on a real
cluster. Write, read, readStream under each trigger, and the archive job.

``make test`` runs the short set; the tests marked ``cluster_full`` run only with
``--spark-cluster=full`` (``make test-spark-cluster``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.sql import DataFrame, SparkSession

from bench.spark_standalone import executor_count
from dbqueue import QueueOptions, QueueSpec, RingQueue, SplitQueue, get_dialect
from dbqueue.drivers import executor_for
from dbqueue.spark.archive import archive
from tests.processes import ROOT
from tests.spark.archive_support import FIELDS as ARCHIVE_FIELDS
from tests.spark.archive_support import (
    OLD_COUNT,
    WEEK,
    Scenario,
    archived_ids,
    build_scenario,
    database_items,
    staging_files,
)
from tests.spark.conftest import SPARK_CLUSTER, create_queue, drop_queue
from tests.spark.streams import FIELDS, counts, delivered, drain, push, stream, to_parquet
from tests.spark.test_read import read
from tests.spark.test_write import numbers, staged, write

pytestmark = SPARK_CLUSTER

DIALECT = get_dialect("postgresql")
#: A long cluster test: only with --spark-cluster=full.
FULL = [pytest.mark.cluster_full, pytest.mark.slow]
#: Seconds a query that ends by itself may take (a hang guard, not a threshold).
PATIENCE = 300.0
#: The stream tests' backlog, and the batch size that makes it several batches.
BACKLOG, PER_BATCH = 5000, 1200


@pytest.fixture
def split(make_queue: Callable[[QueueSpec], QueueSpec], table_name: str) -> QueueSpec:
    return make_queue(QueueSpec(table_name, FIELDS))


@pytest.fixture
def ring(make_queue: Callable[[QueueSpec], QueueSpec], table_name: str) -> QueueSpec:
    return make_queue(QueueSpec(table_name, FIELDS, QueueOptions(capacity=10_000)))


def jvm_of(pid: int) -> int:
    """The JVM a Python worker serves: its first ``java`` ancestor (worker, daemon, JVM)."""
    while pid > 1:
        if Path(f"/proc/{pid}/comm").read_text().strip() == "java":
            return pid
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    raise AssertionError("a Python worker with no JVM among its ancestors")


def where_tasks_run(spark: SparkSession, tasks: int) -> set[tuple[int, int, str]]:
    """(Python worker's pid, its JVM's pid, dbqueue's file) of the tasks of a job of
    ``tasks`` tasks: each imports dbqueue where it runs."""

    def probe(_: Iterator[int]) -> Iterator[tuple[int, int, str]]:
        import dbqueue

        yield (os.getpid(), jvm_of(os.getpid()), dbqueue.__file__)

    return set(spark.sparkContext.parallelize(range(tasks), tasks).mapPartitions(probe).collect())


def test_the_executors_are_two_other_processes_running_this_checkout(
    spark_cluster: SparkSession,
) -> None:
    sc = spark_cluster.sparkContext
    assert sc.master.startswith("spark://")
    # Two executors besides the driver, as the driver's status tracker knows them.
    infos = sc._jsc.sc().statusTracker().getExecutorInfos()
    assert len(infos) == 3 and executor_count(spark_cluster) == 2
    driver_jvm = int(sc._jvm.java.lang.ProcessHandle.current().pid())
    ran = where_tasks_run(spark_cluster, tasks=16)
    workers = {pid for pid, _, _ in ran}
    jvms = {jvm for _, jvm, _ in ran}
    assert os.getpid() not in workers
    # The tasks ran in the two executor JVMs, neither of them the driver's.
    assert len(jvms) == 2 and driver_jvm not in jvms
    assert {file for _, _, file in ran} == {str(ROOT / "dbqueue" / "__init__.py")}


# -- write ---------------------------------------------------------------------------------------


def test_a_write_from_the_executors_fills_a_split_queue_in_order(
    spark_cluster: SparkSession,
    spark_dsn: str,
    spark_conn: psycopg.Connection[Any],
    split: QueueSpec,
) -> None:
    write(numbers(spark_cluster, 20_000, partitions=4), spark_dsn, split.table)
    popped = SplitQueue(split, DIALECT).pop_batch(executor_for(DIALECT, spark_conn), 30_000)
    ordered = [m.payload["n"] for m in sorted(popped, key=lambda m: m.id)]
    assert ordered == list(range(20_000))  # each row once, ids in the DataFrame's order
    assert staged(spark_conn, split) == 0


@pytest.mark.cluster_full
@pytest.mark.slow
def test_a_write_from_the_executors_fills_a_ring(
    spark_cluster: SparkSession,
    spark_dsn: str,
    spark_conn: psycopg.Connection[Any],
    ring: QueueSpec,
) -> None:
    write(numbers(spark_cluster, 8000, partitions=4), spark_dsn, ring.table)
    popped = RingQueue(ring, DIALECT).pop_batch(executor_for(DIALECT, spark_conn), 10_000)
    assert [m.payload["n"] for m in popped] == list(range(8000))
    assert staged(spark_conn, ring) == 0


# -- read ----------------------------------------------------------------------------------------


def test_a_read_spreads_its_id_ranges_over_the_executors(
    spark_cluster: SparkSession,
    spark_dsn: str,
    spark_conn: psycopg.Connection[Any],
    split: QueueSpec,
) -> None:
    push(spark_conn, split, range(10_000))
    df = read(spark_cluster, spark_dsn, split.table, numPartitions="4")
    assert df.rdd.getNumPartitions() == 4
    rows = df.select("n", "state").collect()
    assert sorted(r["n"] for r in rows) == list(range(10_000))
    assert {r["state"] for r in rows} == {"ready"}
    assert counts(spark_conn, split) == {"ready": 10_000}  # a read changes nothing


# -- readStream ----------------------------------------------------------------------------------


def run_until_done(df: DataFrame, checkpoint: str, out: Path, **trigger: Any) -> None:
    """Run a query with a trigger that ends it by itself (availableNow, once) to its end."""
    query = (
        df.writeStream.foreachBatch(to_parquet(out))
        .option("checkpointLocation", checkpoint)
        .trigger(**trigger)
        .start()
    )
    try:
        assert query.awaitTermination(PATIENCE), "the query did not end by itself"
    finally:
        query.stop()


def assert_drained_once(
    spark: SparkSession, out: Path, conn: psycopg.Connection[Any], spec: QueueSpec
) -> None:
    """Every pushed item was delivered exactly once, and the queue is empty (all acked)."""
    assert sorted(n for _, n in delivered(spark, out)) == list(range(BACKLOG))
    assert counts(conn, spec) == {}


def test_a_processing_time_stream_drains_a_backlog_from_the_executors(
    spark_cluster: SparkSession,
    spark_dsn: str,
    spark_conn: psycopg.Connection[Any],
    split: QueueSpec,
    checkpoint: str,
    tmp_path: Path,
) -> None:
    push(spark_conn, split, range(BACKLOG))
    out = tmp_path / "out"
    df = stream(spark_cluster, spark_dsn, split.table, maxMessagesPerBatch=str(PER_BATCH),
                numPartitions="2")  # fmt: skip
    drain(df, checkpoint, to_parquet(out))  # trigger processingTime, then processAllAvailable
    assert_drained_once(spark_cluster, out, spark_conn, split)
    batches = {b for b, _ in delivered(spark_cluster, out)}
    assert len(batches) == -(-BACKLOG // PER_BATCH)  # several batches, none empty


@pytest.mark.parametrize(
    "trigger",
    [
        pytest.param(
            {"availableNow": True},
            marks=FULL,
            id="availableNow",
        ),
        pytest.param(
            {"once": True},
            marks=FULL,
            id="once",
        ),
    ],
)
def test_a_stream_that_ends_by_itself_drains_the_whole_backlog(
    spark_cluster: SparkSession,
    spark_dsn: str,
    spark_conn: psycopg.Connection[Any],
    split: QueueSpec,
    checkpoint: str,
    tmp_path: Path,
    trigger: dict[str, bool],
) -> None:
    push(spark_conn, split, range(BACKLOG))
    out = tmp_path / "out"
    df = stream(spark_cluster, spark_dsn, split.table, maxMessagesPerBatch=str(PER_BATCH),
                numPartitions="2")  # fmt: skip
    run_until_done(df, checkpoint, out, **trigger)
    if "once" in trigger:
        # One batch of everything, acknowledged when the query next starts from its checkpoint.
        assert counts(spark_conn, split) == {"leased": BACKLOG}
        run_until_done(df, checkpoint, out, **trigger)
    assert_drained_once(spark_cluster, out, spark_conn, split)


# -- archive -------------------------------------------------------------------------------------


@pytest.fixture
def scenario(spark_conn: psycopg.Connection[Any], table_name: str) -> Iterator[Scenario]:
    spec = QueueSpec(table_name, ARCHIVE_FIELDS)
    create_queue(spark_conn, spec)
    yield build_scenario(spark_conn, spec)
    drop_queue(spark_conn, spec)


def test_the_archive_job_moves_the_old_items_through_the_executors(
    spark_cluster: SparkSession,
    spark_dsn: str,
    spark_conn: psycopg.Connection[Any],
    scenario: Scenario,
    tmp_path: Path,
) -> None:
    folder = tmp_path / "archive"
    result = archive(spark_cluster, spark_dsn, scenario.table, WEEK, str(folder),
                     batch_size=7, progress=False)  # fmt: skip
    assert (result.rows_expected, result.rows_written, result.rows_deleted) == (OLD_COUNT,) * 3
    assert result.outcome == "archived"
    assert archived_ids(folder) == sorted(scenario.old)
    assert database_items(spark_conn, scenario.spec) == scenario.kept
    assert staging_files(folder) == []
    # A second run finds nothing older than a week left.
    again = archive(spark_cluster, spark_dsn, scenario.table, WEEK, str(folder), progress=False)
    assert again.rows_expected == 0 and archived_ids(folder) == sorted(scenario.old)
