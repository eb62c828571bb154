"""Bulk push from a DataFrame: staged per task, published all at once (dbqueue.spark.writer)."""

from __future__ import annotations

import datetime as dt
import decimal
import threading
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from dbqueue import Field, FieldKind, QueueOptions, QueueSpec, RingQueue, SplitQueue, get_dialect
from dbqueue.drivers import executor_for
from tests.spark.conftest import SPARK

pytestmark = SPARK

DIALECT = get_dialect("postgresql")
RICH = (
    Field("n", FieldKind.BIGINT),
    Field("small", FieldKind.SMALLINT, nullable=True),
    Field("title", FieldKind.TEXT, max_length=20),
    Field("price", FieldKind.DECIMAL, max_digits=10, decimal_places=2, nullable=True),
    Field("ratio", FieldKind.FLOAT, nullable=True),
    Field("flag", FieldKind.BOOLEAN, nullable=True),
    Field("at", FieldKind.DATETIME, nullable=True),
    Field("day", FieldKind.DATE, nullable=True),
    Field("doc", FieldKind.JSON, nullable=True),
    Field("blob", FieldKind.BYTES, nullable=True),
    Field("ref", FieldKind.UUID, nullable=True),
)
SIMPLE = (Field("n", FieldKind.BIGINT), Field("body", FieldKind.TEXT, nullable=True))


@pytest.fixture
def split(make_queue: Callable[[QueueSpec], QueueSpec], table_name: str) -> QueueSpec:
    return make_queue(QueueSpec(table_name, SIMPLE))


@pytest.fixture
def ring(make_queue: Callable[[QueueSpec], QueueSpec], table_name: str) -> QueueSpec:
    return make_queue(QueueSpec(table_name, SIMPLE, QueueOptions(capacity=500)))


def numbers(spark: SparkSession, count: int, partitions: int = 3) -> DataFrame:
    """Rows n = 0..count-1 with body "b<n>", in ``partitions`` partitions, in order."""
    body = F.concat(F.lit("b"), F.col("id").cast("string"))
    return spark.range(0, count, 1, partitions).select(F.col("id").alias("n"), body.alias("body"))


def write(df: DataFrame, dsn: str, table: str, **options: str) -> None:
    writer = df.write.format("dbqueue").option("url", dsn).option("queue", table)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.mode("append").save()


def staged(conn: psycopg.Connection[Any], spec: QueueSpec) -> int:
    """Rows the write left in the stage (not counting the writes' closed markers, part -1)."""
    row = conn.execute(f'SELECT count(*) FROM "{spec.stage_table}" WHERE part >= 0').fetchone()
    assert row is not None
    return int(row[0])


def count(conn: psycopg.Connection[Any], table: str) -> int:
    row = conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()
    assert row is not None
    return int(row[0])


# -- split queues -------------------------------------------------------------------------------


def test_a_dataframe_is_pushed_in_order_and_workers_pop_it(
    spark: SparkSession, spark_dsn: str, spark_conn: psycopg.Connection[Any], split: QueueSpec
) -> None:
    write(numbers(spark, 3000), spark_dsn, split.table)
    queue = SplitQueue(split, DIALECT)
    ex = executor_for(DIALECT, spark_conn)
    popped = queue.pop_batch(ex, 5000)
    # ids drawn in staging order: partition by partition, row by row, so id order is the
    # DataFrame's order here.
    assert [m.payload["n"] for m in sorted(popped, key=lambda m: m.id)] == list(range(3000))
    assert popped[0].payload["body"] == "b0"
    assert staged(spark_conn, split) == 0


def test_a_large_write_refreshes_the_statistics_an_idle_worker_planned_with(
    spark: SparkSession, spark_dsn: str, spark_conn: psycopg.Connection[Any], split: QueueSpec
) -> None:
    """A worker polling the emptied, vacuumed queue has a prepared pop planned for empty
    tables; the publish analyzes the tables (see spark_analyze_split), which makes every
    session plan its statements again when the write commits."""
    spark_conn.execute(f'VACUUM ANALYZE "{split.table}", "{split.meta_table}"')
    queue = SplitQueue(split, DIALECT)
    with psycopg.connect(spark_dsn, autocommit=True) as worker:
        idle = executor_for(DIALECT, worker)
        for _ in range(8):  # psycopg prepares it; PostgreSQL settles on a generic plan
            assert queue.pop_batch(idle, 1000) == []
        write(numbers(spark, 12_000), spark_dsn, split.table)
        rows = spark_conn.execute(
            "SELECT relname, reltuples FROM pg_class WHERE relname IN (%s, %s)",
            (split.table, split.meta_table),
        ).fetchall()
        assert {name: int(tuples) for name, tuples in rows} == {
            split.table: 12_000,
            split.meta_table: 12_000,
        }
        assert len(queue.pop_batch(idle, 1000)) == 1000


def test_every_payload_type_goes_through(
    spark: SparkSession,
    spark_dsn: str,
    spark_conn: psycopg.Connection[Any],
    make_queue: Callable[[QueueSpec], QueueSpec],
    table_name: str,
) -> None:
    spec = make_queue(QueueSpec(table_name, RICH))
    at = dt.datetime(2026, 3, 1, 12, 30, tzinfo=dt.UTC)
    ref = uuid.uuid4()
    title = 'héllo "quoted"\n\tline'
    row = (7, 3, title, decimal.Decimal("12.50"), 0.25, True, at, dt.date(2026, 3, 1),
           '{"a": [1, 2], "b": null}', b"\x00\x01\xff", str(ref))  # fmt: skip
    empty = (8, None, "", None, None, None, None, None, None, None, None)
    schema = T.StructType(
        [
            T.StructField("n", T.LongType()),
            T.StructField("small", T.IntegerType()),
            T.StructField("title", T.StringType()),
            T.StructField("price", T.DecimalType(10, 2)),
            T.StructField("ratio", T.DoubleType()),
            T.StructField("flag", T.BooleanType()),
            T.StructField("at", T.TimestampType()),
            T.StructField("day", T.DateType()),
            T.StructField("doc", T.StringType()),
            T.StructField("blob", T.BinaryType()),
            T.StructField("ref", T.StringType()),
        ]
    )
    write(spark.createDataFrame([row, empty], schema), spark_dsn, spec.table)
    ex = executor_for(DIALECT, spark_conn)
    got = {m.payload["n"]: m.payload for m in SplitQueue(spec, DIALECT).pop_batch(ex, 10)}
    assert got[7] == {
        "n": 7, "small": 3, "title": title,
        "price": decimal.Decimal("12.50"), "ratio": 0.25, "flag": True, "at": at,
        "day": dt.date(2026, 3, 1), "doc": {"a": [1, 2], "b": None},
        "blob": b"\x00\x01\xff", "ref": ref,
    }  # fmt: skip
    assert got[8]["title"] == "" and got[8]["doc"] is None and got[8]["small"] is None


def test_priority_and_run_at_columns_schedule_each_row(
    spark: SparkSession, spark_dsn: str, spark_conn: psycopg.Connection[Any], split: QueueSpec
) -> None:
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    df = spark.createDataFrame(
        [(1, "low", 0, None), (2, "high", 5, None), (3, "later", 9, later)],
        "n long, body string, priority int, run_at timestamp",
    )
    write(df, spark_dsn, split.table)
    ex = executor_for(DIALECT, spark_conn)
    popped = SplitQueue(split, DIALECT).pop_batch(ex, 10)
    assert [m.payload["body"] for m in popped] == ["high", "low"]  # "later" is not due


def test_a_failing_task_publishes_nothing(
    spark: SparkSession, spark_dsn: str, spark_conn: psycopg.Connection[Any], split: QueueSpec
) -> None:
    @F.udf("long")
    def explode_at_2500(n):  # no hints: Spark would read them as a pandas UDF's
        if n == 2500:
            raise ValueError("task failure on purpose")
        return n

    # Partitions 0 and 1 stage and commit their rows; partition 2 fails at row 2500.
    df = numbers(spark, 3000).withColumn("n", explode_at_2500(F.col("n")))
    with pytest.raises(Exception, match="task failure on purpose"):
        write(df, spark_dsn, split.table)
    assert count(spark_conn, split.table) == 0
    assert count(spark_conn, split.meta_table) == 0
    assert staged(spark_conn, split) == 0


def test_a_bad_row_fails_the_write_and_nothing_is_published(
    spark: SparkSession, spark_dsn: str, spark_conn: psycopg.Connection[Any], split: QueueSpec
) -> None:
    df = spark.createDataFrame([(1, "ok"), (2, "x" * 300_000)], "n long, body string")
    with pytest.raises(Exception, match="max_payload_bytes"):
        write(df, spark_dsn, split.table)
    nul = spark.createDataFrame([(1, "ok"), (2, "a\x00b")], "n long, body string")
    with pytest.raises(Exception, match="NUL character"):
        write(nul, spark_dsn, split.table)
    missing = spark.createDataFrame([(1, "ok"), (None, "no n")], "n long, body string")
    with pytest.raises(Exception, match="'n': is not nullable"):
        write(missing, spark_dsn, split.table)
    priority = spark.createDataFrame([(1, "ok", 99_999)], "n long, body string, priority int")
    with pytest.raises(Exception, match="priority 99999 is out of range"):
        write(priority, spark_dsn, split.table)
    # A Spark timestamp runs to 9999: past MAX_RUN_AT, refused as push refuses it.
    far = dt.datetime(9500, 1, 1, tzinfo=dt.UTC)
    run_at = spark.createDataFrame([(1, "far", far)], "n long, body string, run_at timestamp")
    with pytest.raises(Exception, match=r"column 'run_at': run_at must be at most 9000-01-01"):
        write(run_at, spark_dsn, split.table)
    assert count(spark_conn, split.table) == 0 and staged(spark_conn, split) == 0


@pytest.mark.parametrize(
    ("ddl", "message"),
    [
        ("body string", "column 'n' is missing"),
        ("n long, body string, extra int", "column 'extra' is not a field of the queue"),
        ("n string, body string", "column 'n' is string; the field needs"),
        ("n long, body string, run_at timestamp_ntz", "naive datetimes are refused"),
    ],
)
def test_a_dataframe_that_does_not_fit_is_refused_before_any_row_is_written(
    spark: SparkSession,
    spark_dsn: str,
    spark_conn: psycopg.Connection[Any],
    split: QueueSpec,
    ddl: str,
    message: str,
) -> None:
    columns = [c.split()[0] for c in ddl.split(", ")]
    values: dict[str, Any] = {"n": 1, "body": "x", "extra": 1, "run_at": dt.datetime(2026, 1, 1)}
    if "n string" in ddl:
        values["n"] = "1"
    df = spark.createDataFrame([tuple(values[c] for c in columns)], ddl)
    with pytest.raises(Exception, match=message):
        write(df, spark_dsn, split.table)
    assert count(spark_conn, split.table) == 0


def test_overwrite_missing_tables_and_other_databases_are_refused(
    spark: SparkSession, spark_dsn: str, split: QueueSpec
) -> None:
    df = numbers(spark, 10)
    with pytest.raises(Exception, match=r"Use mode\('append'\)"):
        df.write.format("dbqueue").option("url", spark_dsn).option("queue", split.table).mode(
            "overwrite"
        ).save()
    with pytest.raises(Exception, match="no queue table 'nope'"):
        write(df, spark_dsn, "nope")
    with pytest.raises(Exception, match="not a valid identifier"):
        write(df, spark_dsn, "Robert'); DROP TABLE x; --")
    with pytest.raises(Exception, match="needs PostgreSQL"):
        write(df, "sqlite:///tmp/x.db", split.table)
    with pytest.raises(Exception, match=r"option url .* is required"):
        df.write.format("dbqueue").option("queue", split.table).mode("append").save()


@pytest.mark.parametrize("capacity", [None, 500], ids=["split", "ring"])
def test_a_published_write_wakes_the_listening_workers(
    spark: SparkSession,
    spark_dsn: str,
    make_queue: Callable[[QueueSpec], QueueSpec],
    table_name: str,
    capacity: int | None,
) -> None:
    spec = make_queue(QueueSpec(table_name, SIMPLE, QueueOptions(capacity=capacity)))
    with psycopg.connect(spark_dsn, autocommit=True) as listener:
        listener.execute(f'LISTEN "{spec.channel}"')
        write(numbers(spark, 300), spark_dsn, spec.table)
        # At most a second for what the publish's commit already sent.
        assert list(listener.notifies(timeout=1.0, stop_after=1))


# -- ring queues --------------------------------------------------------------------------------


def test_a_write_that_fits_the_ring_is_one_transaction(
    spark: SparkSession, spark_dsn: str, spark_conn: psycopg.Connection[Any], ring: QueueSpec
) -> None:
    write(numbers(spark, 400), spark_dsn, ring.table)
    ex = executor_for(DIALECT, spark_conn)
    popped = RingQueue(ring, DIALECT).pop_batch(ex, 500)
    assert [m.payload["n"] for m in popped] == list(range(400))
    assert staged(spark_conn, ring) == 0


def test_a_write_larger_than_the_ring_waits_for_consumers(
    spark: SparkSession, spark_dsn: str, spark_conn: psycopg.Connection[Any], ring: QueueSpec
) -> None:
    queue = RingQueue(ring, DIALECT)
    got: list[int] = []
    stop = threading.Event()

    def consume() -> None:
        # Until the write has ended (published or failed) and the ring is empty.
        with psycopg.connect(spark_dsn, autocommit=True) as conn:
            ex = executor_for(DIALECT, conn)
            while True:
                ended = stop.is_set()
                messages = queue.pop_batch(ex, 100, mode="at_most_once")
                got.extend(int(m.payload["n"]) for m in messages)
                if not messages:
                    if ended:
                        return
                    stop.wait(0.01)

    consumer = threading.Thread(target=consume)
    consumer.start()
    try:
        write(numbers(spark, 2000), spark_dsn, ring.table)
    finally:
        stop.set()
        consumer.join()
    assert sorted(got) == list(range(2000))  # nothing lost, nothing twice
    assert staged(spark_conn, ring) == 0


def test_a_full_ring_fails_the_write_after_push_timeout_and_says_how_far_it_got(
    spark: SparkSession, spark_dsn: str, spark_conn: psycopg.Connection[Any], ring: QueueSpec
) -> None:
    with pytest.raises(Exception, match=r"ring queue '.*' is full \(500 slots\)"):
        write(numbers(spark, 1200), spark_dsn, ring.table, pushTimeoutSeconds="0.5")
    # The chunks that fitted were published; the rest is gone from the stage.
    assert count(spark_conn, ring.table) > 0 and staged(spark_conn, ring) == 0
    row = spark_conn.execute(f'SELECT count(*) FROM "{ring.table}" WHERE state = 1').fetchone()
    assert row is not None and 0 < row[0] <= 500


def test_a_ring_refuses_scheduling_columns(
    spark: SparkSession, spark_dsn: str, ring: QueueSpec
) -> None:
    df = spark.createDataFrame([(1, "x", 3)], "n long, body string, priority int")
    with pytest.raises(Exception, match="column 'priority' is not a field of the queue"):
        write(df, spark_dsn, ring.table)


def test_a_write_into_a_full_ring_spills_the_rest_with_when_full_spill(
    spark: SparkSession, spark_dsn: str, spark_conn: psycopg.Connection[Any], ring: QueueSpec
) -> None:
    write(numbers(spark, 1200), spark_dsn, ring.table, whenFull="spill")
    assert staged(spark_conn, ring) == 0
    held = spark_conn.execute(f'SELECT count(*) FROM "{ring.table}" WHERE state = 1').fetchone()
    spilled = spark_conn.execute(
        f'SELECT count(*) FROM "{ring.failed_table}" WHERE state = 4'
    ).fetchone()
    assert (held, spilled) == ((500,), (700,))  # nothing refused: the rest in the overflow


def test_an_unknown_when_full_is_refused(
    spark: SparkSession, spark_dsn: str, ring: QueueSpec
) -> None:
    with pytest.raises(Exception, match="option whenFull must be one of spill, raise, wait"):
        write(numbers(spark, 10), spark_dsn, ring.table, whenFull="block")
