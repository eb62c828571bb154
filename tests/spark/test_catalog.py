"""A queue described from the database (dbqueue.spark.catalog): layout, capacity and payload
fields recovered from pg_catalog match what the core created them from."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from dbqueue import Field, FieldKind, QueueOptions, QueueSpec, get_dialect
from dbqueue.errors import InvalidSpec, QueueTableMissing, UnsupportedOperation
from dbqueue.schema import create_ring_statements
from dbqueue.spark.catalog import load_queue
from tests.spark.conftest import SPARK, create_queue, drop_queue
from tests.spark.kinds import KIND_FIELDS

pytestmark = SPARK

DIALECT = get_dialect("postgresql")
Conn = psycopg.Connection[Any]


@pytest.fixture
def queues(spark_conn: Conn) -> Iterator[list[QueueSpec]]:
    """The queues a test creates (append them), dropped afterwards."""
    made: list[QueueSpec] = []
    yield made
    for spec in made:
        drop_queue(spark_conn, spec)


def make(conn: Conn, made: list[QueueSpec], spec: QueueSpec) -> QueueSpec:
    """Create ``spec``'s tables, to be dropped after the test."""
    made.append(spec)
    create_queue(conn, spec)
    return spec


@pytest.mark.parametrize(("capacity", "layout"), [(None, "split"), (7, "ring")])
def test_a_queue_is_found_with_its_layout_and_every_field_as_declared(
    spark_conn: Conn, queues: list[QueueSpec], table_name: str, capacity: int | None, layout: str
) -> None:
    spec = QueueSpec(table_name, KIND_FIELDS, QueueOptions(capacity=capacity))
    queues.append(spec)
    if capacity is None:
        create_queue(spark_conn, spec)
    else:  # numbered from past 2^31, as a long-lived ring is: the capacity is the slot count
        for statement in create_ring_statements(spec, DIALECT, start=2**31 + 5):
            spark_conn.execute(statement)
    found = load_queue(spark_conn, table_name)
    assert (found.ring, found.layout) == (capacity is not None, layout)
    # Kinds, order, NOT NULL (a ring's from its failed table: the slots' columns are all
    # nullable), varchar length, numeric precision and scale, and a ring's capacity.
    assert found.spec == spec


def test_the_callers_options_are_kept_and_only_a_ring_has_a_capacity(
    spark_conn: Conn, queues: list[QueueSpec], table_name: str
) -> None:
    fields = (Field("n", FieldKind.BIGINT),)
    make(spark_conn, queues, QueueSpec(table_name, fields))
    ring = make(spark_conn, queues, QueueSpec(f"{table_name}_r", fields, QueueOptions(capacity=9)))
    wanted = QueueOptions(max_payload_bytes=1000, push_timeout=dt.timedelta(seconds=3))
    asked = QueueOptions(max_payload_bytes=1000, push_timeout=dt.timedelta(seconds=3), capacity=4)
    assert load_queue(spark_conn, table_name, asked).spec.options == wanted
    found = load_queue(spark_conn, ring.table, asked).spec.options
    assert found == QueueOptions(
        max_payload_bytes=1000, push_timeout=dt.timedelta(seconds=3), capacity=9
    )


def test_types_the_core_does_not_create_map_as_far_as_the_catalog_says(
    spark_conn: Conn, queues: list[QueueSpec], table_name: str
) -> None:
    """Columns an adapter's migration may spell differently: real, json, varchar without a
    length, numeric(p) (its scale is 0); a dropped column is not a field."""
    fields = (Field("n", FieldKind.BIGINT), Field("gone", FieldKind.TEXT, nullable=True))
    make(spark_conn, queues, QueueSpec(table_name, fields))
    spark_conn.execute(
        f'ALTER TABLE "{table_name}" ADD COLUMN r real, ADD COLUMN j json NOT NULL, '
        f"ADD COLUMN v varchar, ADD COLUMN d numeric(5), ADD COLUMN w integer NOT NULL DEFAULT 3, "
        f"DROP COLUMN gone"
    )
    assert load_queue(spark_conn, table_name).spec.fields == (
        Field("n", FieldKind.BIGINT),
        Field("r", FieldKind.FLOAT, nullable=True),
        Field("j", FieldKind.JSON),
        Field("v", FieldKind.TEXT, nullable=True),
        Field("d", FieldKind.DECIMAL, nullable=True, max_digits=5, decimal_places=0),
        # A column default is not recovered: a write must give the column.
        Field("w", FieldKind.INTEGER),
    )


def test_a_column_of_another_type_is_refused_by_name(
    spark_conn: Conn, queues: list[QueueSpec], table_name: str
) -> None:
    make(spark_conn, queues, QueueSpec(table_name, (Field("n", FieldKind.BIGINT),)))
    spark_conn.execute(f'ALTER TABLE "{table_name}" ADD COLUMN tags text[]')
    with pytest.raises(InvalidSpec, match=r"column 'tags' of queue .* has type text\[\], which"):
        load_queue(spark_conn, table_name)


def test_a_split_queue_beside_a_queue_named_like_its_failed_table_stays_split(
    spark_conn: Conn, queues: list[QueueSpec], table_name: str
) -> None:
    fields = (Field("n", FieldKind.BIGINT),)
    spec = make(spark_conn, queues, QueueSpec(table_name, fields))
    make(spark_conn, queues, QueueSpec(spec.failed_table, (Field("x", FieldKind.TEXT),)))
    found = load_queue(spark_conn, table_name)
    assert not found.ring and found.spec.fields == fields


def test_missing_tables_and_bad_names_are_refused(
    spark_conn: Conn, queues: list[QueueSpec], table_name: str
) -> None:
    with pytest.raises(QueueTableMissing, match=f"no queue table '{table_name}'"):
        load_queue(spark_conn, table_name)
    # A table that is not a queue's: neither <t>_meta nor <t>_failed beside it.
    spark_conn.execute(f'CREATE TABLE "{table_name}" (id bigint)')
    try:
        with pytest.raises(QueueTableMissing, match="a split queue has"):
            load_queue(spark_conn, table_name)
    finally:
        spark_conn.execute(f'DROP TABLE "{table_name}"')
    # A meta table without its data table.
    spec = make(spark_conn, queues, QueueSpec(table_name, (Field("n", FieldKind.BIGINT),)))
    spark_conn.execute(f'DROP TABLE "{spec.table}"')
    with pytest.raises(QueueTableMissing):
        load_queue(spark_conn, table_name)
    with pytest.raises(InvalidSpec, match="not a valid identifier"):
        load_queue(spark_conn, 'q"; DROP TABLE x; --')


@pytest.mark.parametrize("capacity", [None, 8], ids=["split", "ring"])
def test_a_queue_with_consumer_groups_is_refused_by_name(
    spark_conn: Conn, queues: list[QueueSpec], table_name: str, capacity: int | None
) -> None:
    options = QueueOptions(groups=("email", "search"), capacity=capacity)
    make(spark_conn, queues, QueueSpec(table_name, (Field("n", FieldKind.BIGINT),), options))
    with pytest.raises(UnsupportedOperation, match=r"consumer groups \(email, search\)"):
        load_queue(spark_conn, table_name)
