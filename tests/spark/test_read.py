"""Batch read: ``spark.read.format("dbqueue")`` reads a queue's items in the chosen states, in
parallel id ranges (dbqueue.spark.reader), with every payload type, from both layouts."""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from pyspark.sql import DataFrame, SparkSession

from dbqueue import Field, FieldKind, QueueOptions, QueueSpec, RingQueue, SplitQueue, get_dialect
from dbqueue.drivers import executor_for
from dbqueue.spark.catalog import load_queue
from dbqueue.spark.reader import IdRange, QueueReader
from dbqueue.spark.types import read_schema
from tests.spark.conftest import SPARK, create_queue, drop_queue
from tests.spark.kinds import KIND_FIELDS, expected_schema

pytestmark = SPARK

DIALECT = get_dialect("postgresql")
UTC = dt.UTC
FIELDS = (Field("n", FieldKind.BIGINT), Field("body", FieldKind.TEXT, nullable=True))
OLD = dt.datetime(2025, 3, 1, 8, tzinfo=UTC)
CUT = "2025-06-01T00:00:00+00:00"

Conn = psycopg.Connection[Any]


@dataclass(frozen=True)
class Mixed:
    """A queue whose items are in several states: id -> (state, n) of each."""

    spec: QueueSpec
    items: dict[int, tuple[str, int]]

    def having(self, *states: str) -> dict[int, tuple[str, int]]:
        """The items in these states."""
        return {i: item for i, item in self.items.items() if item[0] in states}


def read(spark: SparkSession, dsn: str, table: str, **options: str) -> DataFrame:
    """``spark.read.format("dbqueue")`` of ``table`` with these options."""
    reader = spark.read.format("dbqueue").option("url", dsn).option("queue", table)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def items(df: DataFrame) -> dict[int, tuple[str, int]]:
    """id -> (state, n) of what a read returned, checking no id comes twice."""
    rows = df.select("id", "state", "n").collect()
    got = {r["id"]: (r["state"], r["n"]) for r in rows}
    assert len(got) == len(rows), "an id was read twice"
    return got


def set_finished(conn: Conn, table: str, column: str, ids: list[int], at: dt.datetime) -> None:
    """Backdate when items finished (``run_at`` of a split queue's meta, ``failed_at`` of a
    ring's failed table)."""
    conn.execute(f'UPDATE "{table}" SET {column} = %s WHERE id = ANY(%s)', [at, ids])


@pytest.fixture
def mixed(spark_conn: Conn, table_name: str) -> Iterator[Mixed]:
    """A split queue (keep_done, one attempt) with 8 ready, 3 leased, 5 done and 4 failed
    items, through the core's own push, pop, ack and fail."""
    spec = QueueSpec(table_name, FIELDS, QueueOptions(keep_done=True, max_attempts=1))
    create_queue(spark_conn, spec)
    queue, ex = SplitQueue(spec, DIALECT), executor_for(DIALECT, spark_conn)
    ids = queue.push_many(ex, [{"n": i, "body": f"b{i}"} for i in range(20)])
    n_of = {item_id: i for i, item_id in enumerate(ids)}
    leased = queue.pop_batch(ex, 12)
    queue.ack(ex, leased[:5])
    queue.fail(ex, leased[5:9], "boom")
    states = dict.fromkeys(ids, "ready")
    for first, last, state in ((0, 5, "done"), (5, 9, "failed"), (9, 12, "leased")):
        states.update(dict.fromkeys((m.id for m in leased[first:last]), state))
    yield Mixed(spec, {i: (states[i], n_of[i]) for i in ids})
    drop_queue(spark_conn, spec)


@pytest.fixture
def split(spark_conn: Conn, table_name: str) -> Iterator[QueueSpec]:
    """An empty split queue."""
    spec = QueueSpec(table_name, FIELDS)
    create_queue(spark_conn, spec)
    yield spec
    drop_queue(spark_conn, spec)


# -- states -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "states"),
    [
        (None, ("ready", "leased", "done", "failed")),
        ("ready", ("ready",)),
        ("leased", ("leased",)),
        ("done", ("done",)),
        ("failed", ("failed",)),
        (" Failed , DONE ", ("done", "failed")),
    ],
)
def test_a_read_returns_exactly_the_items_in_the_chosen_states(
    spark: SparkSession, spark_dsn: str, mixed: Mixed, option: str | None, states: tuple[str]
) -> None:
    options = {} if option is None else {"state": option}
    df = read(spark, spark_dsn, mixed.spec.table, **options)
    assert items(df) == mixed.having(*states)


def test_the_meta_columns_say_what_happened_to_each_item(
    spark: SparkSession, spark_dsn: str, spark_conn: Conn, mixed: Mixed
) -> None:
    rows = {r["id"]: r for r in read(spark, spark_dsn, mixed.spec.table).toArrow().to_pylist()}
    meta = {
        row[0]: row[1:]
        for row in spark_conn.execute(
            f"SELECT m.id, m.priority, m.attempts, d.enqueued_at, m.run_at, m.lease_until, "
            f'd.last_error FROM "{mixed.spec.meta_table}" AS m '
            f'JOIN "{mixed.spec.table}" AS d USING (id)'
        )
    }
    columns = ("priority", "attempts", "enqueued_at", "run_at", "lease_until", "last_error")
    assert {i: tuple(r[c] for c in columns) for i, r in rows.items()} == meta
    for item_id, (state, n) in mixed.items.items():
        row = rows[item_id]
        assert row["body"] == f"b{n}"
        assert (row["attempts"], row["last_error"]) == (
            (0, None) if state == "ready" else (1, "boom" if state == "failed" else None)
        )
        assert (row["lease_until"] is not None) == (state == "leased")


def test_finished_before_keeps_the_items_that_finished_earlier(
    spark: SparkSession, spark_dsn: str, spark_conn: Conn, mixed: Mixed
) -> None:
    old = [i for i, (state, n) in mixed.items.items() if state in ("done", "failed") and n % 2]
    set_finished(spark_conn, mixed.spec.meta_table, "run_at", old, OLD)
    expected = {i: mixed.items[i] for i in old}
    assert {s for s, _ in expected.values()} == {"done", "failed"}
    both = read(spark, spark_dsn, mixed.spec.table, state="done,failed", finishedBefore=CUT)
    assert items(both) == expected
    failed = read(spark, spark_dsn, mixed.spec.table, state="failed", finishedBefore=CUT)
    assert items(failed) == {i: s for i, s in expected.items() if s[0] == "failed"}
    rows = both.select("run_at").toArrow().column(0).to_pylist()
    assert rows == [OLD] * len(old)


def test_spark_sql_aggregates_over_a_read(
    spark: SparkSession, spark_dsn: str, mixed: Mixed
) -> None:
    read(spark, spark_dsn, mixed.spec.table, numPartitions="3").createOrReplaceTempView("items")
    try:
        rows = spark.sql(
            "SELECT state, count(*) AS c, sum(n) AS total, max(attempts) AS most "
            "FROM items GROUP BY state"
        ).collect()
    finally:
        spark.catalog.dropTempView("items")
    expected: dict[str, tuple[int, int, int]] = {}
    for state, n in mixed.items.values():
        c, total, _ = expected.get(state, (0, 0, 0))
        expected[state] = (c + 1, total + n, 0 if state == "ready" else 1)
    assert {r["state"]: (r["c"], r["total"], r["most"]) for r in rows} == expected


# -- schema and payload types -------------------------------------------------------------------


def test_every_payload_kind_reads_with_its_spark_type_and_exact_value(
    spark: SparkSession, spark_dsn: str, spark_conn: Conn, table_name: str
) -> None:
    spec = QueueSpec(table_name, KIND_FIELDS)
    create_queue(spark_conn, spec)
    try:
        ref = uuid.uuid4()
        full = {
            "big": 2**62, "i": -(2**31), "small": 32767, "title": 'héllo "q"\n\t',
            "note": "x" * 5000, "price": decimal.Decimal("-12345678.90"),
            "amount": decimal.Decimal("12345678901234567890.123456789012345678"),
            "ratio": 0.1, "flag": False, "at": dt.datetime(1969, 7, 20, 20, 17, 40, 1, UTC),
            "day": dt.date(1, 1, 1), "doc": {"a": [1, 2.5, "é"], "b": None},
            "blob": bytes(range(256)), "ref": ref,
        }  # fmt: skip
        empty = {"big": 0, "title": ""}
        ex = executor_for(DIALECT, spark_conn)
        first, second = SplitQueue(spec, DIALECT).push_many(ex, [full, empty])
        df = read(spark, spark_dsn, spec.table)
        assert df.schema == expected_schema()
        rows = {r["id"]: r for r in df.toArrow().to_pylist()}
        names = [f.name for f in KIND_FIELDS]
        assert {n: rows[first][n] for n in names} == {
            **full, "doc": '{"a": [1, 2.5, "é"], "b": null}', "ref": str(ref)
        }  # fmt: skip
        assert {n: rows[second][n] for n in names} == {
            **dict.fromkeys(names), "big": 0, "title": ""
        }  # fmt: skip
        # The session's time zone does not move an instant or a date.
        elsewhere = read(spark, f"{spark_dsn} options='-c TimeZone=Asia/Kolkata'", spec.table)
        assert elsewhere.toArrow().to_pylist() == df.toArrow().to_pylist()
        # Spark's own rows agree with the Arrow view (JVM types, not just the batches).
        row = df.where(f"id = {first}").collect()[0]
        assert (row["price"], row["small"], row["blob"]) == (
            full["price"],
            32767,
            bytearray(range(256)),
        )
    finally:
        drop_queue(spark_conn, spec)


def test_an_empty_queue_reads_as_an_empty_dataframe_with_the_schema(
    spark: SparkSession, spark_dsn: str, split: QueueSpec
) -> None:
    for options in ({}, {"state": "failed", "numPartitions": "4"}):
        df = read(spark, spark_dsn, split.table, **options)
        assert df.schema == read_schema(split)
        assert df.collect() == []
        assert df.groupBy("state").count().collect() == []


# -- partitions ---------------------------------------------------------------------------------


def reader_for(dsn: str, spec: QueueSpec, states: list[str], parts: int | None) -> QueueReader:
    """The batch reader the source makes, to look at its partitions directly."""
    with psycopg.connect(dsn) as conn:
        queue = load_queue(conn, spec.table)
    return QueueReader(dsn, queue, read_schema(queue.spec), states, None, parts)


def test_num_partitions_splits_the_ids_into_ranges_that_cover_them_once(
    spark: SparkSession, spark_dsn: str, spark_conn: Conn, split: QueueSpec
) -> None:
    queue, ex = SplitQueue(split, DIALECT), executor_for(DIALECT, spark_conn)
    ids = queue.push_many(ex, [{"n": i, "body": None} for i in range(300)])
    # Gaps: a hole of 100 ids in the middle, and every third id of the rest.
    gone = ids[100:200] + ids[::3]
    queue.delete(ex, gone)
    kept = sorted(set(ids) - set(gone))
    for parts in (1, 2, 7, 12):
        ranges = reader_for(spark_dsn, split, ["ready"], parts).partitions()
        assert all(isinstance(r, IdRange) and r.source == "split" for r in ranges)
        assert len(ranges) == parts
        assert ranges[0].lo == kept[0] and ranges[-1].hi == kept[-1] + 1
        assert all(a.hi == b.lo and a.lo < a.hi for a, b in itertools.pairwise(ranges))
        df = read(spark, spark_dsn, split.table, numPartitions=str(parts))
        assert df.rdd.getNumPartitions() == parts
        got = df.select("id").collect()
        assert sorted(r["id"] for r in got) == kept  # all of them, none twice
    # More partitions than ids in the range: one id each at most.
    few = sorted(kept[:3])
    queue.delete(ex, kept[3:])
    span = few[-1] - few[0] + 1
    ranges = reader_for(spark_dsn, split, ["ready"], 1000).partitions()
    assert len(ranges) == span
    df = read(spark, spark_dsn, split.table, numPartitions="1000")
    assert sorted(r["id"] for r in df.select("id").collect()) == few


def test_without_num_partitions_a_small_queue_is_one_partition(
    spark: SparkSession, spark_dsn: str, mixed: Mixed
) -> None:
    df = read(spark, spark_dsn, mixed.spec.table)
    assert df.rdd.getNumPartitions() == 1
    assert items(df) == mixed.items


def test_partitions_cover_only_the_ids_of_the_chosen_states(spark_dsn: str, mixed: Mixed) -> None:
    failed = sorted(mixed.having("failed"))
    (only,) = reader_for(spark_dsn, mixed.spec, ["failed"], None).partitions()
    assert (only.lo, only.hi) == (failed[0], failed[-1] + 1)


# -- ring queues --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RingItems:
    """A ring's messages: id -> (state, n), and the ids in its failed table."""

    spec: QueueSpec
    items: dict[int, tuple[str, int]]
    failed: list[int]


@pytest.fixture
def ring(spark_conn: Conn, table_name: str) -> Iterator[RingItems]:
    """A ring of 50 slots whose numbers have wrapped around: 20 ready, 3 leased, 3 waiting for
    a retry, and 4 in the failed table."""
    spec = QueueSpec(table_name, FIELDS, QueueOptions(capacity=50, max_attempts=5))
    create_queue(spark_conn, spec)
    ex = executor_for(DIALECT, spark_conn)
    queue = RingQueue(spec, DIALECT)
    queue.push_many(ex, [{"n": -1, "body": None}] * 40)
    assert len(queue.pop_batch(ex, 40, mode="at_most_once")) == 40
    ids = queue.push_many(ex, [{"n": i, "body": f"b{i}"} for i in range(30)])
    leased = queue.pop_batch(ex, 10)
    last_try = QueueSpec(table_name, FIELDS, QueueOptions(capacity=50, max_attempts=1))
    RingQueue(last_try, DIALECT).fail(ex, leased[:4], "gave up")
    queue.fail(ex, leased[4:7], "again later")
    states = dict.fromkeys(ids, "ready")
    for first, last, state in ((0, 4, "failed"), (4, 7, "retrying"), (7, 10, "leased")):
        states.update(dict.fromkeys((m.id for m in leased[first:last]), state))
    n_of = {item_id: i for i, item_id in enumerate(ids)}
    yield RingItems(spec, {i: (states[i], n_of[i]) for i in ids}, [m.id for m in leased[:4]])
    drop_queue(spark_conn, spec)


@pytest.mark.parametrize(
    "option", [None, "ready", "leased", "retrying", "failed", "ready,failed", "leased,retrying"]
)
def test_a_ring_reads_its_slots_and_its_failed_table(
    spark: SparkSession, spark_dsn: str, ring: RingItems, option: str | None
) -> None:
    options = {} if option is None else {"state": option}
    states = option.split(",") if option else ["ready", "leased", "retrying", "failed"]
    df = read(spark, spark_dsn, ring.spec.table, numPartitions="3", **options)
    assert items(df) == {i: s for i, s in ring.items.items() if s[0] in states}
    assert df.schema == read_schema(ring.spec)
    # numPartitions is the total, the slots and the failed table sharing it (one each at least).
    assert df.rdd.getNumPartitions() == 3


def test_the_slots_and_the_failed_table_share_the_partitions(
    spark_dsn: str, ring: RingItems
) -> None:
    states = ["ready", "leased", "retrying", "failed"]
    ranges = reader_for(spark_dsn, ring.spec, states, 4).partitions()
    # Failed messages, and those waiting for a retry, are out of the ring, in its side table.
    aside = sorted(i for i, s in ring.items.items() if s[0] in ("failed", "retrying"))
    slots = sorted(i for i, s in ring.items.items() if s[0] in ("ready", "leased"))
    assert [(r.source, r.lo, r.hi) for r in ranges if r.source == "failed"] == [
        ("failed", aside[0], aside[-1] + 1)
    ]
    on_slots = [r for r in ranges if r.source == "ring"]
    assert len(on_slots) == 3
    assert (on_slots[0].lo, on_slots[-1].hi) == (slots[0], slots[-1] + 1)
    # Fewer partitions asked than tables to read: one each.
    assert [r.source for r in reader_for(spark_dsn, ring.spec, states, 1).partitions()] == [
        "ring",
        "failed",
    ]


def test_a_ring_read_says_when_and_why_items_failed_or_wait(
    spark: SparkSession, spark_dsn: str, spark_conn: Conn, ring: RingItems
) -> None:
    rows = read(spark, spark_dsn, ring.spec.table).toArrow().to_pylist()
    for row in rows:
        state = ring.items[row["id"]][0]
        assert row["priority"] == 0 and row["body"] == f"b{ring.items[row['id']][1]}"
        assert row["last_error"] == {"failed": "gave up", "retrying": "again later"}.get(state)
        assert row["attempts"] == (0 if state == "ready" else 1)
        if state == "retrying":  # due again when its back-off ends
            assert row["lease_until"] is None and row["run_at"] > row["enqueued_at"]
        elif state == "failed":
            assert row["lease_until"] is None and row["run_at"] >= row["enqueued_at"]
        else:
            assert row["run_at"] == row["enqueued_at"]
            assert (row["lease_until"] is not None) == (state == "leased")
    failed_at = dict(
        spark_conn.execute(
            f'SELECT id, failed_at FROM "{ring.spec.failed_table}" WHERE state = 3'
        ).fetchall()
    )
    assert {r["id"]: r["run_at"] for r in rows if r["state"] == "failed"} == failed_at


def test_a_ring_reads_failed_items_finished_before_a_time(
    spark: SparkSession, spark_dsn: str, spark_conn: Conn, ring: RingItems
) -> None:
    old = ring.failed[:2]
    set_finished(spark_conn, ring.spec.failed_table, "failed_at", old, OLD)
    df = read(spark, spark_dsn, ring.spec.table, state="failed", finishedBefore=CUT)
    assert items(df) == {i: ring.items[i] for i in old}


# -- bad options --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"state": "archived"}, r"option state 'archived': a split queue's states are ready, "),
        ({"state": ","}, "option state ','"),
        ({"numPartitions": "0"}, "option numPartitions must be a positive integer, got '0'"),
        ({"numPartitions": "two"}, "option numPartitions must be a positive integer"),
        ({"numPartitions": "1.5"}, "option numPartitions must be a positive integer"),
        ({"finishedBefore": "yesterday", "state": "done"}, "is not an ISO-8601 time"),
        ({"finishedBefore": "2025-01-01T00:00:00", "state": "done"}, "has no time zone"),
        ({"finishedBefore": CUT}, "finishedBefore applies to finished items only"),
        ({"finishedBefore": CUT, "state": "ready,done"}, "applies to finished items only"),
    ],
)
def test_bad_read_options_are_refused_clearly(
    spark: SparkSession, spark_dsn: str, split: QueueSpec, options: dict[str, str], message: str
) -> None:
    with pytest.raises(Exception, match=message):
        read(spark, spark_dsn, split.table, **options).collect()


def test_a_ring_has_no_done_state(spark: SparkSession, spark_dsn: str, ring: RingItems) -> None:
    with pytest.raises(Exception, match="a ring queue's states are ready, leased, retrying"):
        read(spark, spark_dsn, ring.spec.table, state="done").collect()


def test_missing_queues_and_bad_names_and_other_databases_are_refused(
    spark: SparkSession, spark_dsn: str, split: QueueSpec
) -> None:
    with pytest.raises(Exception, match="no queue table 'nope'"):
        read(spark, spark_dsn, "nope").collect()
    with pytest.raises(Exception, match="not a valid identifier"):
        read(spark, spark_dsn, "x; DROP TABLE y").collect()
    with pytest.raises(Exception, match="needs PostgreSQL"):
        read(spark, "mysql://db/x", split.table).collect()
    with pytest.raises(Exception, match=r"option queue .* is required"):
        spark.read.format("dbqueue").option("url", spark_dsn).load().collect()
    with pytest.raises(Exception, match=r"option url .* is required"):
        spark.read.format("dbqueue").option("queue", split.table).load().collect()


def test_an_unconstrained_decimal_is_rounded_to_spark_s_scale_or_refused(
    spark: SparkSession, spark_dsn: str, spark_conn: Conn, table_name: str
) -> None:
    spec = QueueSpec(table_name, (Field("amount", FieldKind.DECIMAL),))
    create_queue(spark_conn, spec)
    try:
        ex = executor_for(DIALECT, spark_conn)
        queue = SplitQueue(spec, DIALECT)
        places = decimal.Decimal("0.12345678901234567850")  # 20 places: Spark keeps 18
        queue.push_many(ex, [{"amount": places}, {"amount": decimal.Decimal("-2.5")}])
        df = read(spark, spark_dsn, spec.table)
        assert sorted(df.toArrow().column("amount").to_pylist()) == [
            decimal.Decimal("-2.5"),
            decimal.Decimal("0.123456789012345679"),  # half up, as Spark's JDBC source
        ]
        queue.push(ex, {"amount": decimal.Decimal(10) ** 20})  # 21 integer digits
        with pytest.raises(Exception, match=r"column 'amount' holds 10+, which does not fit"):
            read(spark, spark_dsn, spec.table).collect()
    finally:
        drop_queue(spark_conn, spec)
