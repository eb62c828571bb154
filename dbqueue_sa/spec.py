"""From a mapped class to the core's QueueSpec: column types to field kinds, options, defaults.

A split queue (``QueueMixin``) takes its payload from the data table's own columns; a ring
queue (``RingQueueMixin``) from the columns as declared, before the slot table makes them
nullable (an empty slot holds no message; the failed table keeps the declared nullability).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapper
from sqlalchemy.sql.schema import ColumnDefault

from dbqueue.errors import InvalidSpec
from dbqueue.schema import FAILED_BASE_COLUMNS, RING_BASE_COLUMNS, SPLIT_BASE_COLUMNS
from dbqueue.spec import NO_DEFAULT, Field, FieldKind, QueueOptions, QueueSpec, options_from
from dbqueue.unique import unique_columns

#: SQLAlchemy types and the kinds they store, most specific first (BigInteger is an Integer,
#: Float a Numeric, Text a String).
KINDS: tuple[tuple[type[sa.types.TypeEngine[Any]], FieldKind], ...] = (
    (sa.Boolean, FieldKind.BOOLEAN),
    (sa.SmallInteger, FieldKind.SMALLINT),
    (sa.BigInteger, FieldKind.BIGINT),
    (sa.Integer, FieldKind.INTEGER),
    (sa.Float, FieldKind.FLOAT),
    (sa.Numeric, FieldKind.DECIMAL),
    (sa.Text, FieldKind.TEXT),
    (sa.String, FieldKind.TEXT),
    (sa.DateTime, FieldKind.DATETIME),
    (sa.Date, FieldKind.DATE),
    (sa.JSON, FieldKind.JSON),
    (sa.LargeBinary, FieldKind.BYTES),
    (sa.Uuid, FieldKind.UUID),
)
_INTEGERS = frozenset({FieldKind.SMALLINT, FieldKind.INTEGER, FieldKind.BIGINT})
_DATETIME = frozenset({FieldKind.DATETIME})
_TEXT = frozenset({FieldKind.TEXT})
#: Types that subclass a supported one but store something else.
REFUSED = (sa.Enum, sa.Interval, sa.PickleType, sa.ARRAY)
#: The columns the mixin gives every split queue's data table (not payload), and the kinds
#: they must keep: a class (or another mixin before it) that redeclares one with another
#: type breaks the join with the meta table.
SPLIT_BASE_KINDS: Mapping[str, frozenset[FieldKind]] = {
    "id": _INTEGERS,
    "enqueued_at": _DATETIME,
    "last_error": _TEXT,
}
assert frozenset(SPLIT_BASE_KINDS) == SPLIT_BASE_COLUMNS
#: The columns of every ring slot table besides the payload, and their kinds.
RING_BASE_KINDS: Mapping[str, frozenset[FieldKind]] = {
    "slot": _INTEGERS,
    "seq": _INTEGERS,
    "state": _INTEGERS,
    "attempts": _INTEGERS,
    "pushed_at": _DATETIME,
    "lease_until": _DATETIME,
    "last_error": _TEXT,
}
assert frozenset(RING_BASE_KINDS) == RING_BASE_COLUMNS
RING_HINT = (
    "use dbqueue_sa.RingQueueMixin for a bounded ring of preallocated slots, or remove it "
    "from this QueueMixin class"
)


def _kind_of(typ: sa.types.TypeEngine[Any]) -> FieldKind | None:
    """The kind a column type stores, or None if a queue cannot store it."""
    if isinstance(typ, (*REFUSED, sa.types.TypeDecorator)):
        return None
    return next((kind for base, kind in KINDS if isinstance(typ, base)), None)


def _kind(column: sa.Column[Any], label: str) -> FieldKind:
    typ = column.type
    kind = _kind_of(typ)
    if kind is not None:
        return kind
    supported = ", ".join(sorted({t.__name__ for t, _ in KINDS}))
    # Interval and PickleType are TypeDecorators too: they get the plain message, since no
    # stored type would keep their meaning.
    if isinstance(typ, sa.types.TypeDecorator) and not isinstance(typ, REFUSED):
        raise InvalidSpec(
            f"{label}: column {column.name!r} is a TypeDecorator ({type(typ).__name__}); the "
            f"queue binds values itself, so its conversions would not run: declare the stored "
            f"type ({supported})"
        )
    raise InvalidSpec(
        f"{label}: column {column.name!r} is {type(typ).__name__}, which a queue cannot store; "
        f"supported: {supported}"
    )


def _default(column: sa.Column[Any], label: str) -> Any:
    if column.server_default is not None:
        # Computed and Identity columns are server defaults too.
        raise InvalidSpec(
            f"{label}: column {column.name!r} has a database-side default (server_default, "
            f"Computed or Identity); a queue push writes every payload column itself, so it "
            f"would never apply: give it default=<value or zero-argument callable> instead"
        )
    default = column.default
    if default is None:
        return NO_DEFAULT
    if isinstance(default, ColumnDefault) and default.is_scalar:
        return default.arg
    if isinstance(default, ColumnDefault) and default.is_callable:
        # SQLAlchemy wraps a zero-argument callable to take an execution context (the wrapper's
        # __wrapped__ is the callable, on 2.0 and 2.1) and keeps a one-argument one as given;
        # the queue calls it for every push that leaves the field out, with no context.
        wrapped: Callable[[Any], Any] = default.arg
        if getattr(wrapped, "__wrapped__", None) is None:
            raise InvalidSpec(
                f"{label}: column {column.name!r} has a default that takes SQLAlchemy's "
                f"execution context; a queue push has none to give: use a zero-argument "
                f"callable"
            )
        return lambda: wrapped(None)
    raise InvalidSpec(
        f"{label}: column {column.name!r} has a SQL expression as its default; a queue push "
        f"needs a Python value or callable (default=...) or none"
    )


def to_field(column: sa.Column[Any], label: str, *, nullable: bool | None = None) -> Field:
    """The core description of one payload column (``nullable`` overrides the column's)."""
    kind = _kind(column, label)
    typ: Any = column.type
    if kind is FieldKind.DATETIME and not typ.timezone:
        raise InvalidSpec(
            f"{label}: column {column.name!r} is a DateTime without a time zone; queue "
            f"timestamps are aware: declare it mapped_column(DateTime(timezone=True))"
        )
    return Field(
        name=column.name,
        kind=kind,
        nullable=bool(column.nullable) if nullable is None else nullable,
        # Text(n) is still an unbounded text column (as Django's TextField): only String(n)
        # is a varchar(n).
        max_length=typ.length if kind is FieldKind.TEXT and not isinstance(typ, sa.Text) else None,
        max_digits=typ.precision if kind is FieldKind.DECIMAL else None,
        decimal_places=typ.scale if kind is FieldKind.DECIMAL else None,
        default=_default(column, label),
        # SQLAlchemy has no unsigned integer types: ``info={"min_value": 0}`` says what
        # Django's Positive*Field says (a push below it is refused).
        min_value=column.info.get("min_value") if kind in _INTEGERS else None,
    )


def payload_columns(table: sa.Table, base: Iterable[str]) -> list[sa.Column[Any]]:
    """The table's columns that are payload: all but the layout's own (``base``)."""
    skip = frozenset(base)
    return [c for c in table.columns if c.name not in skip]


def options_for(cls: type, *, ring: bool, columns: Mapping[str, str] | None = None) -> QueueOptions:
    """QueueOptions from the class's ``__queue_options__`` mapping. Its ``unique`` names
    mapped attributes, given to the core as their columns (``columns``: attribute or column
    name -> column, see :func:`payload_names`)."""
    declared = getattr(cls, "__queue_options__", None) or {}
    label = f"{cls.__name__}.__queue_options__"
    if not isinstance(declared, Mapping):
        raise InvalidSpec(f"{label} must be a dict of option names to values")
    values = dict(declared)
    if "unique" in values and not ring:  # a ring's options_from refuses it
        values["unique"] = unique_columns(values["unique"], columns or {}, label)
    return options_from(values, label=label, ring=ring, aware_datetimes=True, ring_hint=RING_HINT)


def payload_names(mapper: Mapper[Any], payload: Iterable[sa.Column[Any]]) -> dict[str, str]:
    """Each payload column by its name, and by the attribute that maps it when that is named
    otherwise (``order_ref = mapped_column("order_id")``): what ``unique`` may name."""
    columns = {c.name: c.name for c in payload}
    # Declarative hands the Mapper the columns whose attribute is not their name (the others
    # it finds in the table); mapper.attrs is not there yet while the class is instrumented.
    renamed: Mapping[str, Any] = getattr(mapper, "_init_properties", None) or {}
    for attribute, prop in renamed.items():
        if isinstance(prop, sa.Column) and prop.name in columns:
            columns[attribute] = prop.name
    return columns


def check_table(table: sa.Table, label: str) -> None:
    """Refuse what the core's SQL cannot address: a table in another schema."""
    if table.schema is not None:
        raise InvalidSpec(
            f"{label}: table {table.name!r} is in schema {table.schema!r}; queue tables live "
            f"in the connection's default schema (set search_path to use another)"
        )


def check_base_columns(
    table: sa.Table, kinds: Mapping[str, frozenset[FieldKind]], key: str, label: str
) -> None:
    """Refuse a table whose own columns are not the mixin's: another primary key, or a layout
    column redeclared with another type (a ``UUID`` ``id`` from another mixin, say)."""
    primary = [c.name for c in table.primary_key.columns]
    if primary != [key]:
        raise InvalidSpec(
            f"{label}: a queue table's primary key is the mixin's {key!r} column, but this one "
            f"is ({', '.join(primary)}): remove primary_key=True from the other column(s) "
            f"(a business key can be an ordinary or unique column)"
        )
    for name, allowed in kinds.items():
        column = table.columns.get(name)
        if column is None or _kind_of(column.type) not in allowed:
            declared = "missing" if column is None else f"declared as {column.type!r}"
            raise InvalidSpec(
                f"{label}: column {name!r} belongs to the queue ({', '.join(sorted(kinds))}) "
                f"and is {declared}: remove that declaration and keep the mixin's"
            )


def _columns_named(item: sa.Index | sa.UniqueConstraint) -> str:
    return ", ".join(repr(c.name) for c in item.columns) or repr(item.name)


def check_ring_columns(table: sa.Table, label: str) -> None:
    """Refuse payload columns a ring slot cannot hold (see dbqueue_django.spec for why)."""
    payload = payload_columns(table, RING_BASE_COLUMNS)
    for column in payload:
        if column.foreign_keys:
            raise InvalidSpec(
                f"{label}: column {column.name!r} is a foreign key; a ring queue's payload "
                f"cannot hold a relation (a slot keeps stale values after its message is "
                f"gone): store the key in an Integer or BigInteger column"
            )
    # Declared on a column (index=True, unique=True) or in __table_args__ alike; any index,
    # even on the ring's own columns, would stop PostgreSQL's HOT updates.
    extra: list[sa.Index | sa.UniqueConstraint] = [
        *table.indexes,
        *(c for c in table.constraints if isinstance(c, sa.UniqueConstraint)),
    ]
    if extra:
        raise InvalidSpec(
            f"{label}: column(s) {_columns_named(extra[0])} have a unique constraint or an "
            f"index; a ring slot is rewritten in place for every message, so the slot table "
            f"takes none besides its key (an index would also stop PostgreSQL's HOT updates): "
            f"remove index=True, unique=True or the Index/UniqueConstraint"
        )
    for column in payload:
        if column.name in FAILED_BASE_COLUMNS:
            raise InvalidSpec(
                f"{label}: column {column.name!r} uses a name the failed table needs "
                f"({', '.join(sorted(FAILED_BASE_COLUMNS))})"
            )


def build_spec(
    cls: type,
    table: sa.Table,
    fields: Iterable[Field],
    *,
    ring: bool,
    columns: Mapping[str, str] | None = None,
) -> QueueSpec:
    """The validated spec of a queue class (raises InvalidSpec naming the class); ``columns``
    are what ``unique`` may name (:func:`payload_names`)."""
    label = cls.__name__
    options = options_for(cls, ring=ring, columns=columns)
    try:
        return QueueSpec(table.name, tuple(fields), options)
    except InvalidSpec as exc:
        raise InvalidSpec(f"{label}: {exc}") from None
