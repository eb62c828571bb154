"""From mapped columns to the core spec: every supported column type and ``Mapped[...]``
annotation to its field kind, lengths, precision, defaults and nullability; and every bad
declaration refused with an InvalidSpec, at the class statement, that says what to change.

Each class is declared on a fresh ``DeclarativeBase`` (its own MetaData), so nothing reaches
``tests.sqlalchemy.models.Base``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from dbqueue.errors import InvalidSpec
from dbqueue.spec import MAX_CAPACITY, MAX_TABLE_NAME, NO_DEFAULT, Field, FieldKind
from dbqueue_sa import JSONB, QueueMixin, RingQueueMixin

pytestmark = pytest.mark.sqlalchemy
K = FieldKind


def declare(
    columns: dict[str, Any] | None = None,
    *,
    annotations: dict[str, Any] | None = None,
    ring: bool = False,
    options: Any = None,
    table: str = "spec_q",
) -> type[Any]:
    """A queue class on a fresh declarative base, as a class statement would declare it."""

    class Base(DeclarativeBase):
        pass

    namespace: dict[str, Any] = {
        "__tablename__": table,
        "__module__": __name__,
        "__annotations__": dict(annotations or {}),
        **(columns or {}),
    }
    if options is not None or ring:
        namespace["__queue_options__"] = {"capacity": 8} if options is None else options
    mixin = RingQueueMixin if ring else QueueMixin
    return type("Declared", (mixin, Base), namespace)


def fields(cls: type[Any]) -> dict[str, Field]:
    return {f.name: f for f in cls.__queue_spec__.fields}


def refused(says: str, **kw: Any) -> InvalidSpec:
    """Declare, expect InvalidSpec naming the class and saying ``says``."""
    with pytest.raises(InvalidSpec, match="Declared") as caught:
        declare(**kw)
    assert says in str(caught.value), str(caught.value)
    return caught.value


# -- kinds ----------------------------------------------------------------------------------


def test_mapped_annotations_without_explicit_types() -> None:
    cls = declare(
        {
            "at": mapped_column(sa.DateTime(timezone=True)),
            "doc": mapped_column(JSONB),
        },
        annotations={
            "i": Mapped[int],
            "s": Mapped[str],
            "f": Mapped[float],
            "b": Mapped[bool],
            "d": Mapped[decimal.Decimal],
            "u": Mapped[uuid.UUID],
            "raw": Mapped[bytes],
            "day": Mapped[dt.date],
            "at": Mapped[dt.datetime],
            "doc": Mapped[dict[str, Any]],
            "maybe": Mapped[int | None],
        },
    )
    got = {name: (f.kind, f.nullable) for name, f in fields(cls).items()}
    assert got == {
        "i": (K.INTEGER, False),
        "s": (K.TEXT, False),
        "f": (K.FLOAT, False),
        "b": (K.BOOLEAN, False),
        "d": (K.DECIMAL, False),
        "u": (K.UUID, False),
        "raw": (K.BYTES, False),
        "day": (K.DATE, False),
        "at": (K.DATETIME, False),
        "doc": (K.JSON, False),
        "maybe": (K.INTEGER, True),
    }
    assert fields(cls)["s"].max_length is None  # String() without a length: unbounded


EXPLICIT = [
    (sa.SmallInteger(), K.SMALLINT),
    (sa.Integer(), K.INTEGER),
    (sa.BigInteger(), K.BIGINT),
    (sa.Float(), K.FLOAT),
    (sa.Double(), K.FLOAT),
    (sa.Numeric(8, 2), K.DECIMAL),
    (sa.String(40), K.TEXT),
    (sa.Unicode(40), K.TEXT),
    (sa.Text(), K.TEXT),
    (sa.UnicodeText(), K.TEXT),
    (sa.Boolean(), K.BOOLEAN),
    (sa.DateTime(timezone=True), K.DATETIME),
    (sa.Date(), K.DATE),
    (sa.JSON(), K.JSON),
    (JSONB, K.JSON),
    (postgresql.JSONB(), K.JSON),
    (sa.LargeBinary(), K.BYTES),
    (sa.Uuid(), K.UUID),
    (sa.UUID(), K.UUID),
]


@pytest.mark.parametrize(("typ", "kind"), EXPLICIT, ids=lambda v: repr(v)[:30])
def test_explicit_column_types(typ: sa.types.TypeEngine[Any], kind: FieldKind) -> None:
    cls = declare({"v": mapped_column(typ)}, annotations={"v": Mapped[Any]})
    assert fields(cls)["v"].kind is kind


def test_lengths_precision_and_scale() -> None:
    cls = declare(
        {
            "code": mapped_column(sa.String(12)),
            "body": mapped_column(sa.Text(100)),
            "amount": mapped_column(sa.Numeric(10, 3)),
            "loose": mapped_column(sa.Numeric()),
            "ratio": mapped_column(sa.Float(precision=24)),
        },
        annotations=dict.fromkeys(("code", "body", "amount", "loose", "ratio"), Mapped[Any]),
    )
    f = fields(cls)
    assert f["code"].max_length == 12
    # Text(n) is still an unbounded text column in the database, as the core declares it.
    assert f["body"].max_length is None
    assert (f["amount"].max_digits, f["amount"].decimal_places) == (10, 3)
    assert (f["loose"].max_digits, f["loose"].decimal_places) == (None, None)
    assert (f["ratio"].max_digits, f["ratio"].max_length) == (None, None)


def test_nullable_follows_the_column_over_the_annotation() -> None:
    cls = declare(
        {"a": mapped_column(nullable=True), "b": mapped_column(nullable=False)},
        annotations={"a": Mapped[int], "b": Mapped[int | None], "c": Mapped[str | None]},
    )
    f = fields(cls)
    assert (f["a"].nullable, f["b"].nullable, f["c"].nullable) == (True, False, True)
    assert f["c"].has_default and f["c"].default_value() is None


def test_min_value_from_info_on_integers_only() -> None:
    cls = declare(
        {
            "n": mapped_column(info={"min_value": 0}),
            "s": mapped_column(info={"min_value": 0}),
        },
        annotations={"n": Mapped[int], "s": Mapped[str]},
    )
    assert fields(cls)["n"].min_value == 0
    assert fields(cls)["s"].min_value is None


def test_the_column_name_not_the_attribute_name_is_the_field() -> None:
    cls = declare({"attr": mapped_column("col", sa.Integer())}, annotations={"attr": Mapped[int]})
    assert cls.__queue_spec__.field_names == ("col",)


def test_naive_datetime_is_refused_with_the_fix() -> None:
    for column in ({}, {"at": mapped_column(sa.DateTime())}):
        refused(
            "declare it mapped_column(DateTime(timezone=True))",
            columns=column,
            annotations={"at": Mapped[dt.datetime]},
        )


class Upper(sa.types.TypeDecorator[str]):
    impl = sa.String
    cache_ok = True


@pytest.mark.parametrize(
    ("typ", "says"),
    [
        (Upper(), "is a TypeDecorator (Upper)"),
        (sa.Enum("a", "b", name="ab"), "is Enum, which a queue cannot store"),
        (sa.Interval(), "is Interval, which a queue cannot store"),
        (sa.ARRAY(sa.Integer()), "is ARRAY, which a queue cannot store"),
        (sa.PickleType(), "is PickleType, which a queue cannot store"),
        (sa.Time(), "is Time, which a queue cannot store"),
    ],
    ids=["typedecorator", "enum", "interval", "array", "pickle", "time"],
)
def test_unsupported_types(typ: sa.types.TypeEngine[Any], says: str) -> None:
    exc = refused(says, columns={"v": mapped_column(typ)}, annotations={"v": Mapped[Any]})
    assert "column 'v'" in str(exc) and "BigInteger, Boolean, Date" in str(exc)


def test_timedelta_annotation_is_refused() -> None:
    refused("is Interval", annotations={"gap": Mapped[dt.timedelta]})


# -- defaults -------------------------------------------------------------------------------


def test_scalar_and_callable_defaults() -> None:
    counter = itertools.count(1)
    cls = declare(
        {
            "n": mapped_column(default=7),
            "flag": mapped_column(default=False),
            "serial": mapped_column(default=lambda: next(counter)),
            "tag": mapped_column(default=None, nullable=True),
        },
        annotations={
            "n": Mapped[int],
            "flag": Mapped[bool],
            "serial": Mapped[int],
            "tag": Mapped[str],
        },
    )
    f = fields(cls)
    assert (f["n"].default, f["flag"].default, f["tag"].default) == (7, False, NO_DEFAULT)
    assert f["tag"].default_value() is None
    # A zero-argument callable is called once per push that leaves the field out.
    assert [f["serial"].default_value() for _ in range(3)] == [1, 2, 3]


def test_a_column_without_default_has_none() -> None:
    f = fields(declare(annotations={"n": Mapped[int]}))["n"]
    assert f.default is NO_DEFAULT and not f.has_default


def _context_default(context: Any) -> int:
    return 1


@pytest.mark.parametrize(
    ("column", "says"),
    [
        (mapped_column(default=sa.func.now()), "has a SQL expression as its default"),
        (mapped_column(default=sa.text("1")), "has a SQL expression as its default"),
        (mapped_column(default=_context_default), "takes SQLAlchemy's execution context"),
        (mapped_column(server_default="3"), "database-side default"),
        (mapped_column(sa.Computed("1 + 1")), "database-side default"),
        (mapped_column(sa.Identity()), "database-side default"),
    ],
    ids=["func", "text", "context", "server_default", "computed", "identity"],
)
def test_defaults_a_push_cannot_use(column: Any, says: str) -> None:
    exc = refused(says, columns={"v": column}, annotations={"v": Mapped[int]})
    assert "column 'v'" in str(exc)


# -- names ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ("Jobs", "is not a valid identifier: use lower-case letters"),
        ("jobs-2", "is not a valid identifier"),
        ("j" * (MAX_TABLE_NAME + 1), f"at most {MAX_TABLE_NAME} are allowed"),
    ],
    ids=["upper", "dash", "long"],
)
def test_invalid_table_names(table: str, says: str) -> None:
    refused(says, table=table, annotations={"n": Mapped[int]})


def test_the_longest_table_name_is_accepted() -> None:
    cls = declare(annotations={"n": Mapped[int]}, table="t" * MAX_TABLE_NAME, ring=True)
    assert len(cls.__queue_spec__.push_seq) == 63


@pytest.mark.parametrize("name", ["priority", "state", "run_at", "attempts", "seq", "queue"])
def test_reserved_column_names(name: str) -> None:
    refused("uses a reserved name", annotations={name: Mapped[int]})


def test_a_reserved_column_name_under_another_attribute_name() -> None:
    refused(
        "field 'priority' of queue 'spec_q' uses a reserved name",
        columns={"prio": mapped_column("priority", sa.Integer())},
        annotations={"prio": Mapped[int]},
    )


def test_an_upper_case_column_name() -> None:
    refused(
        "field name of queue 'spec_q' 'Name' is not a valid identifier",
        columns={"name": mapped_column("Name", sa.Text())},
        annotations={"name": Mapped[str]},
    )


# -- options --------------------------------------------------------------------------------


def test_options_reach_the_spec() -> None:
    cls = declare(
        annotations={"n": Mapped[int]},
        options={"max_attempts": 2, "lease": dt.timedelta(seconds=9), "max_payload_bytes": 64},
    )
    options = cls.__queue_spec__.options
    assert (options.max_attempts, options.lease, options.max_payload_bytes) == (
        2,
        dt.timedelta(seconds=9),
        64,
    )
    assert options.aware_datetimes and options.capacity is None


@pytest.mark.parametrize(
    ("options", "ring", "says"),
    [
        ({"max_attempt": 3}, False, "unknown option(s) max_attempt; known: backoff"),
        ({"capacity": 8}, False, "capacity is an option of ring queues only; use dbqueue_sa."),
        (
            {"push_timeout": dt.timedelta(1), "hole_timeout": dt.timedelta(1)},
            False,
            "hole_timeout, push_timeout are options of ring queues only",
        ),
        ({}, True, "a ring queue needs capacity = <number of slots>"),
        ({"capacity": 0}, True, f"capacity must be an int between 1 and {MAX_CAPACITY}"),
        ({"capacity": MAX_CAPACITY + 1}, True, "capacity must be an int between"),
        ({"capacity": "8"}, True, "capacity must be an int between"),
        ({"capacity": True}, True, "capacity must be an int between"),
        ({"max_attempts": 0}, False, "max_attempts must be between 1 and 32767, got 0"),
        ({"max_attempts": 40_000}, False, "max_attempts must be between 1 and 32767"),
        ({"max_attempts": "3"}, False, "max_attempts must be an int, got '3'"),
        ({"lease": 30}, False, "__queue_options__.lease must be a timedelta"),
        ({"backoff": 2}, False, "backoff must be a dbqueue.Backoff"),
        ({"max_payload_bytes": 0}, False, "max_payload_bytes must be a positive integer"),
        (["capacity"], True, "__queue_options__ must be a dict of option names to values"),
        (
            {"capacity": 8, "keep_done": True},
            True,
            "keep_done is an option of split queues only; a ring queue reuses its slots",
        ),
        ({"keep_done": "yes"}, False, "keep_done must be True or False, got 'yes'"),
        ({"keep_done": 1}, False, "keep_done must be True or False, got 1"),
        ({"capacity": 8, "when_full": "block"}, True, "when_full must be one of 'spill', 'raise'"),
        (
            {"capacity": 8, "when_full": "raise", "push_timeout": dt.timedelta(1)},
            True,
            "push_timeout applies to when_full='wait' only",
        ),
        ({"when_full": "raise"}, False, "when_full is an option of ring queues only"),
    ],
    ids=[
        "unknown",
        "capacity-on-split",
        "ring-options-on-split",
        "ring-without-capacity",
        "capacity-0",
        "capacity-too-big",
        "capacity-str",
        "capacity-bool",
        "attempts-0",
        "attempts-too-many",
        "attempts-str",
        "lease-int",
        "backoff",
        "payload-bytes",
        "not-a-dict",
        "keep-done-on-ring",
        "keep-done-str",
        "keep-done-int",
        "when-full-unknown",
        "when-full-with-push-timeout",
        "when-full-on-split",
    ],
)
def test_bad_options(options: Any, ring: bool, says: str) -> None:
    exc = refused(says, annotations={"n": Mapped[int]}, ring=ring, options=options)
    assert "Declared.__queue_options__" in str(exc)


# -- what the spec means at push time, on both databases ---------------------------------------


@pytest.fixture
def counted(url: str) -> Iterator[tuple[type[Any], sa.Engine]]:
    """A queue whose ``n`` defaults to a counter, its tables created in the test's database."""
    counter = itertools.count(1)
    cls = declare(
        {
            "n": mapped_column(default=lambda: next(counter)),
            "label": mapped_column(sa.String(5), default="none"),
            "note": mapped_column(nullable=True),
        },
        annotations={"n": Mapped[int], "label": Mapped[str], "note": Mapped[str]},
        table="spec_counted",
    )
    engine = sa.create_engine(url)
    cls.metadata.create_all(engine)
    yield cls, engine
    cls.metadata.drop_all(engine)
    engine.dispose()


def test_defaults_fill_in_at_push(counted: tuple[type[Any], sa.Engine]) -> None:
    cls, engine = counted
    with Session(engine) as session, session.begin():
        cls.queue.push_many(session, [{}, {"n": 10}, {}])
        cls.queue.push(session, label="given", note="x")
    with Session(engine) as session:
        rows = [(j.n, j.label, j.note) for j in session.scalars(sa.select(cls).order_by(cls.id))]
    assert rows == [(1, "none", None), (10, "none", None), (2, "none", None), (3, "given", "x")]
