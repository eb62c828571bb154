"""Every payload kind as a field, with the Spark and Arrow types a read gives it: the mapping
table the read, catalog and types tests check against (written out here, not derived)."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import types as T

from dbqueue import Field, FieldKind

#: (field, Spark type, Arrow type): each kind, NOT NULL and nullable, with and without limits.
KINDS = (
    (Field("big", FieldKind.BIGINT), T.LongType(), pa.int64()),
    (Field("i", FieldKind.INTEGER, nullable=True), T.IntegerType(), pa.int32()),
    (Field("small", FieldKind.SMALLINT, nullable=True), T.ShortType(), pa.int16()),
    (Field("title", FieldKind.TEXT, max_length=20), T.StringType(), pa.string()),
    (Field("note", FieldKind.TEXT, nullable=True), T.StringType(), pa.string()),
    (Field("price", FieldKind.DECIMAL, max_digits=10, decimal_places=2, nullable=True),
     T.DecimalType(10, 2), pa.decimal128(10, 2)),
    (Field("amount", FieldKind.DECIMAL, nullable=True), T.DecimalType(38, 18),
     pa.decimal128(38, 18)),
    (Field("ratio", FieldKind.FLOAT, nullable=True), T.DoubleType(), pa.float64()),
    (Field("flag", FieldKind.BOOLEAN, nullable=True), T.BooleanType(), pa.bool_()),
    (Field("at", FieldKind.DATETIME, nullable=True), T.TimestampType(),
     pa.timestamp("us", tz="UTC")),
    (Field("day", FieldKind.DATE, nullable=True), T.DateType(), pa.date32()),
    (Field("doc", FieldKind.JSON, nullable=True), T.StringType(), pa.string()),
    (Field("blob", FieldKind.BYTES, nullable=True), T.BinaryType(), pa.binary()),
    (Field("ref", FieldKind.UUID, nullable=True), T.StringType(), pa.string()),
)  # fmt: skip
KIND_FIELDS = tuple(f for f, _, _ in KINDS)
#: The columns every read has before the payload: name, Spark type, nullable.
META = (
    ("id", T.LongType(), False),
    ("state", T.StringType(), False),
    ("priority", T.ShortType(), False),
    ("attempts", T.ShortType(), False),
    ("enqueued_at", T.TimestampType(), True),
    ("run_at", T.TimestampType(), True),
    ("lease_until", T.TimestampType(), True),
    ("last_error", T.StringType(), True),
)


def expected_schema(fields: tuple[Field, ...] = KIND_FIELDS) -> T.StructType:
    """The read schema of a queue of ``fields`` (from :data:`KINDS`), written out."""
    spark = {f.name: t for f, t, _ in KINDS}
    return T.StructType(
        [T.StructField(n, t, nullable) for n, t, nullable in META]
        + [T.StructField(f.name, spark[f.name], f.nullable) for f in fields]
    )
