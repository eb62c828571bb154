"""Payload fields as Spark and Arrow types, and the check of a DataFrame written to a queue.

A field's Spark type is the one a Spark user would pick for that column: integers by width,
``double`` for floats, ``decimal(p, s)`` (``decimal(38, 18)`` for an unconstrained numeric, as
Spark's JDBC source reads it), ``timestamp`` for aware datetimes (Spark keeps UTC instants),
``string`` for text, JSON (the JSON text) and uuids.

Writes accept any column type that converts to the field without loss of meaning: a narrower
integer into a wider one, a wider one into a narrower one with a range check per row (Spark
types Python ints as ``long``), integers and decimals into floats and decimals. A
``timestamp_ntz`` is refused like a naive datetime anywhere else in dbqueue.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import types as T

from dbqueue.errors import InvalidPayload
from dbqueue.spec import Field, FieldKind, QueueSpec

#: Spark's type for an unconstrained numeric.
DEFAULT_DECIMAL = (38, 18)
_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
_NUMERIC = (*_INTEGRAL, T.FloatType, T.DoubleType, T.DecimalType)
#: What a write may hold for each kind (see the module docstring).
_ACCEPTED: dict[FieldKind, tuple[type[T.DataType], ...]] = {
    FieldKind.SMALLINT: _INTEGRAL,
    FieldKind.INTEGER: _INTEGRAL,
    FieldKind.BIGINT: _INTEGRAL,
    FieldKind.FLOAT: _NUMERIC,
    FieldKind.DECIMAL: (*_INTEGRAL, T.DecimalType),
    FieldKind.TEXT: (T.StringType, T.VarcharType, T.CharType),
    FieldKind.BOOLEAN: (T.BooleanType,),
    FieldKind.DATETIME: (T.TimestampType,),
    FieldKind.DATE: (T.DateType,),
    FieldKind.JSON: (T.StringType,),
    FieldKind.BYTES: (T.BinaryType,),
    FieldKind.UUID: (T.StringType,),
}
#: The ranges of the integer kinds, checked per row when the column is wider.
INT_RANGES = {
    FieldKind.SMALLINT: (-(2**15), 2**15 - 1),
    FieldKind.INTEGER: (-(2**31), 2**31 - 1),
    FieldKind.BIGINT: (-(2**63), 2**63 - 1),
}
#: The columns of every read (batch and stream) before the payload fields.
META_FIELDS = (
    T.StructField("id", T.LongType(), False),
    T.StructField("state", T.StringType(), False),
    T.StructField("priority", T.ShortType(), False),
    T.StructField("attempts", T.ShortType(), False),
    T.StructField("enqueued_at", T.TimestampType(), True),
    T.StructField("run_at", T.TimestampType(), True),
    T.StructField("lease_until", T.TimestampType(), True),
    T.StructField("last_error", T.StringType(), True),
)
#: Optional columns of a write to a split queue: a per-row priority and due time.
SCHEDULE_COLUMNS = {"priority": _INTEGRAL, "run_at": (T.TimestampType,)}


def spark_type(f: Field) -> T.DataType:
    """The Spark type a read returns for field ``f``."""
    kind = f.kind
    if kind is FieldKind.DECIMAL:
        if f.max_digits is None:
            return T.DecimalType(*DEFAULT_DECIMAL)
        return T.DecimalType(f.max_digits, f.decimal_places or 0)
    return {
        FieldKind.SMALLINT: T.ShortType(),
        FieldKind.INTEGER: T.IntegerType(),
        FieldKind.BIGINT: T.LongType(),
        FieldKind.FLOAT: T.DoubleType(),
        FieldKind.TEXT: T.StringType(),
        FieldKind.BOOLEAN: T.BooleanType(),
        FieldKind.DATETIME: T.TimestampType(),
        FieldKind.DATE: T.DateType(),
        FieldKind.JSON: T.StringType(),
        FieldKind.BYTES: T.BinaryType(),
        FieldKind.UUID: T.StringType(),
    }[kind]


def read_schema(spec: QueueSpec) -> T.StructType:
    """The schema of what a read of the queue returns: the meta columns, then the payload."""
    payload = [T.StructField(f.name, spark_type(f), f.nullable) for f in spec.fields]
    return T.StructType([*META_FIELDS, *payload])


def arrow_type(data_type: T.DataType) -> pa.DataType:
    """The Arrow type Spark expects in a record batch for a column of ``data_type``."""
    if isinstance(data_type, T.DecimalType):
        return pa.decimal128(data_type.precision, data_type.scale)
    return {
        T.ShortType: pa.int16(),
        T.IntegerType: pa.int32(),
        T.LongType: pa.int64(),
        T.DoubleType: pa.float64(),
        T.StringType: pa.string(),
        T.BooleanType: pa.bool_(),
        T.TimestampType: pa.timestamp("us", tz="UTC"),
        T.DateType: pa.date32(),
        T.BinaryType: pa.binary(),
    }[type(data_type)]


@dataclass(frozen=True, slots=True)
class WritePlan:
    """How a DataFrame's columns feed a queue: the payload fields it has, in the
    DataFrame's column names, and whether it carries per-row ``priority`` / ``run_at``."""

    columns: tuple[str, ...]
    fields: tuple[Field, ...]
    priority: bool
    run_at: bool


def plan_write(spec: QueueSpec, schema: T.StructType, *, ring: bool) -> WritePlan:
    """Check a DataFrame's schema against the queue's fields before any row is written;
    raise InvalidPayload listing every missing, unknown or mistyped column."""
    by_name = {f.name: f for f in spec.fields}
    problems: list[str] = []
    present: dict[str, T.StructField] = {}
    for column in schema.fields:
        name = column.name
        if name in present:
            problems.append(f"column {name!r} appears twice")
        present[name] = column
        accepted: tuple[type[T.DataType], ...] | None = (
            SCHEDULE_COLUMNS.get(name) if not ring else None
        )
        field = by_name.get(name)
        if field is None and accepted is None:
            known = ", ".join([*by_name, *([] if ring else SCHEDULE_COLUMNS)])
            problems.append(f"column {name!r} is not a field of the queue (fields: {known})")
        elif field is not None:
            accepted = _ACCEPTED[field.kind]
        if accepted is not None and not isinstance(column.dataType, accepted):
            what = (
                "timestamp_ntz: naive datetimes are refused, use timestamp"
                if isinstance(column.dataType, T.TimestampNTZType)
                else column.dataType.simpleString()
            )
            wanted = "/".join(t.typeName() for t in accepted)
            problems.append(f"column {name!r} is {what}; the field needs {wanted}")
    for field in spec.fields:
        if field.name not in present and not field.has_default:
            problems.append(f"column {field.name!r} is missing (the field is NOT NULL)")
    if problems:
        raise InvalidPayload(
            f"cannot write this DataFrame to queue {spec.table!r}: " + "; ".join(problems)
        )
    fields = tuple(f for f in spec.fields if f.name in present)
    return WritePlan(
        columns=tuple(f.name for f in fields),
        fields=fields,
        priority=not ring and "priority" in present,
        run_at=not ring and "run_at" in present,
    )
