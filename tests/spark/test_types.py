"""The type mapping of the Spark source (dbqueue.spark.types): each payload kind's Spark and
Arrow type on read, and which DataFrame column types a write accepts for it. Pure: no Spark
session, no database (the end-to-end checks are in test_read.py and test_write.py)."""

from __future__ import annotations

import pytest
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_type

from dbqueue import Field, FieldKind, QueueOptions, QueueSpec
from dbqueue.errors import InvalidPayload
from dbqueue.spark.types import WritePlan, arrow_type, plan_write, read_schema, spark_type
from tests.spark.conftest import SPARK
from tests.spark.kinds import KIND_FIELDS, KINDS, expected_schema

pytestmark = SPARK

INTEGRAL = {"byte", "short", "integer", "long"}
#: The DataFrame column types a write accepts for each kind, written out.
ACCEPTS = {
    FieldKind.SMALLINT: INTEGRAL,
    FieldKind.INTEGER: INTEGRAL,
    FieldKind.BIGINT: INTEGRAL,
    FieldKind.FLOAT: INTEGRAL | {"float", "double", "decimal"},
    FieldKind.DECIMAL: INTEGRAL | {"decimal"},
    FieldKind.TEXT: {"string", "varchar", "char"},
    FieldKind.BOOLEAN: {"boolean"},
    FieldKind.DATETIME: {"timestamp"},
    FieldKind.DATE: {"date"},
    FieldKind.JSON: {"string"},
    FieldKind.BYTES: {"binary"},
    FieldKind.UUID: {"string"},
}
#: A column of every type a DataFrame may hold, by the names above.
COLUMN_TYPES = {
    "byte": T.ByteType(),
    "short": T.ShortType(),
    "integer": T.IntegerType(),
    "long": T.LongType(),
    "float": T.FloatType(),
    "double": T.DoubleType(),
    "decimal": T.DecimalType(12, 3),
    "string": T.StringType(),
    "varchar": T.VarcharType(5),
    "char": T.CharType(5),
    "boolean": T.BooleanType(),
    "timestamp": T.TimestampType(),
    "timestamp_ntz": T.TimestampNTZType(),
    "date": T.DateType(),
    "binary": T.BinaryType(),
    "array": T.ArrayType(T.StringType()),
    "map": T.MapType(T.StringType(), T.LongType()),
}


def schema(*columns: tuple[str, T.DataType]) -> T.StructType:
    """A DataFrame schema of these (name, type) columns."""
    return T.StructType([T.StructField(name, data_type) for name, data_type in columns])


def test_every_kind_is_in_the_mapping_table() -> None:
    assert {f.kind for f in KIND_FIELDS} == set(FieldKind)
    assert set(ACCEPTS) == set(FieldKind)


@pytest.mark.parametrize(("field", "spark", "arrow"), KINDS, ids=[f.name for f in KIND_FIELDS])
def test_each_kind_reads_as_its_spark_and_arrow_type(
    field: Field, spark: T.DataType, arrow: object
) -> None:
    assert spark_type(field) == spark
    assert arrow_type(spark) == arrow
    # What Spark itself expects in a record batch of that column (it refuses any other).
    assert arrow_type(spark) == to_arrow_type(spark, timezone="UTC")


def test_a_decimal_without_places_has_scale_zero() -> None:
    assert spark_type(Field("d", FieldKind.DECIMAL, max_digits=7)) == T.DecimalType(7, 0)


def test_the_read_schema_is_the_meta_columns_then_the_payload_for_both_layouts() -> None:
    split = QueueSpec("q", KIND_FIELDS)
    ring = QueueSpec("q", KIND_FIELDS, QueueOptions(capacity=10))
    assert read_schema(split) == read_schema(ring) == expected_schema()
    assert read_schema(QueueSpec("q", ())) == expected_schema(())


@pytest.mark.parametrize("kind", list(FieldKind))
def test_a_write_accepts_exactly_the_column_types_that_convert_to_the_kind(
    kind: FieldKind,
) -> None:
    spec = QueueSpec("q", (Field("v", kind),))
    for name, data_type in COLUMN_TYPES.items():
        if name in ACCEPTS[kind]:
            plan = plan_write(spec, schema(("v", data_type)), ring=False)
            assert plan.fields == spec.fields and plan.columns == ("v",)
        else:
            with pytest.raises(InvalidPayload, match=r"column 'v' is .*; the field needs"):
                plan_write(spec, schema(("v", data_type)), ring=False)


def test_a_refused_column_names_its_type_and_what_the_field_needs() -> None:
    spec = QueueSpec("q", (Field("at", FieldKind.DATETIME), Field("n", FieldKind.SMALLINT)))
    with pytest.raises(InvalidPayload) as caught:
        plan_write(spec, schema(("at", T.TimestampNTZType()), ("n", T.DoubleType())), ring=False)
    assert str(caught.value) == (
        "cannot write this DataFrame to queue 'q': column 'at' is timestamp_ntz: naive "
        "datetimes are refused, use timestamp; the field needs timestamp; column 'n' is "
        "double; the field needs byte/short/integer/long"
    )


def test_every_problem_of_a_dataframe_is_listed_at_once() -> None:
    spec = QueueSpec(
        "q",
        (
            Field("n", FieldKind.BIGINT),
            Field("body", FieldKind.TEXT),
            Field("k", FieldKind.INTEGER, default=3),
            Field("note", FieldKind.TEXT, nullable=True),
        ),
    )
    columns = (("n", T.StringType()), ("extra", T.LongType()), ("n", T.LongType()))
    with pytest.raises(InvalidPayload) as caught:
        plan_write(spec, schema(*columns), ring=False)
    message = str(caught.value)
    for problem in (
        "column 'n' is string",
        "column 'extra' is not a field of the queue (fields: n, body, k, note, priority, run_at)",
        "column 'n' appears twice",
        "column 'body' is missing (the field is NOT NULL)",
    ):
        assert problem in message
    # Fields with a default, and nullable ones, may be left out.
    assert "'k'" not in message and "'note'" not in message


def test_the_plan_follows_the_queue_s_field_order_and_notes_scheduling_columns() -> None:
    c = Field("c", FieldKind.DATE, nullable=True)
    spec = QueueSpec("q", (Field("a", FieldKind.BIGINT), Field("b", FieldKind.TEXT), c))
    columns = (("run_at", T.TimestampType()), ("b", T.StringType()), ("a", T.ByteType()))
    assert plan_write(spec, schema(*columns), ring=False) == WritePlan(
        columns=("a", "b"), fields=spec.fields[:2], priority=False, run_at=True
    )


def test_scheduling_columns_are_typed_and_a_ring_has_none() -> None:
    spec = QueueSpec("q", (Field("n", FieldKind.BIGINT),))
    plan = plan_write(spec, schema(("priority", T.ShortType()), ("n", T.LongType())), ring=False)
    assert (plan.priority, plan.run_at, plan.columns) == (True, False, ("n",))
    for name, wrong in (("priority", T.StringType()), ("run_at", T.TimestampNTZType())):
        with pytest.raises(InvalidPayload, match=f"column '{name}' is"):
            plan_write(spec, schema(("n", T.LongType()), (name, wrong)), ring=False)
        with pytest.raises(InvalidPayload, match=r"is not a field of the queue \(fields: n\)"):
            plan_write(spec, schema(("n", T.LongType()), (name, wrong)), ring=True)
