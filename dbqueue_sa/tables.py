"""The tables a queue class adds to its ``MetaData``, column for column what
``dbqueue.schema`` and the Django migrations create (``tests/sqlalchemy/test_parity.py``):

- split: the meta table ``<table>_meta`` with its two partial indexes (a unique queue's also
  with ``unique_key`` and its partial unique index); after ``create_all`` the PostgreSQL
  storage parameters (``dbqueue.schema.tuning_statements``); and its head table
  ``<table>_head`` (``dbqueue.schema.head_statement``). A queue with consumer groups has
  instead a meta table per group, ``<table>_meta_<group>`` (with the group's ``last_error``),
  each tuned as it is created (``dbqueue.schema.group_statements``), and a head table per
  group, ``<table>_head_<group>``.
- ring: the failed table ``<table>_failed``; after the slot table is created, its counters,
  storage parameters and preallocated slots (``dbqueue.schema.ring_slot_statements``), and
  after it is dropped, its counters.

Every queue table's columns get the variants that make ``create_all`` write the core's
column types (:func:`dialect_types`: jsonb, text for an unbounded String, double precision;
on SQLite decimal, real, JSON as text, aware timestamps in UTC), so the columns store and
return what the core writes and reads.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect as SADialect
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from dbqueue.dialects import Dialect, get_dialect
from dbqueue.errors import InvalidSpec, UnsupportedDatabase
from dbqueue.message import State
from dbqueue.schema import (
    RING_BASE_COLUMNS,
    drop_group_counter_statements,
    drop_ring_counter_statements,
    group_ring_fill_statements,
    ring_slot_statements,
    set_statements,
    storage_parameters,
    tuning_statements,
)
from dbqueue.spec import QueueSpec
from dbqueue.unique import UNIQUE_KEY_COLUMN, UniqueScope

#: SQLAlchemy dialect names and the core dialects they run.
DIALECTS = {"postgresql": "postgresql", "sqlite": "sqlite"}


#: The DB-API drivers the core's SQL runs on, per SQLAlchemy dialect (psycopg 3's ``%(name)s``
#: and binary ``%(name)b`` parameters, numbered for asyncpg; sqlite3's ``:name``), and the URL
#: to use.
DRIVERS = {"postgresql": ("psycopg", "asyncpg"), "sqlite": ("pysqlite", "aiosqlite")}
URLS = {
    "postgresql": "postgresql+psycopg://user:password@host/dbname (psycopg 3, for Engine and "
    "AsyncEngine alike; postgresql+asyncpg:// for an AsyncEngine)",
    "sqlite": "sqlite:///path.db (sqlite+aiosqlite:///path.db for an AsyncEngine)",
}


def core_dialect(name: str) -> Dialect:
    """The core dialect for a SQLAlchemy dialect name, or UnsupportedDatabase."""
    core = DIALECTS.get(name)
    if core is None:
        raise UnsupportedDatabase(
            f"dbqueue supports {', '.join(sorted(DIALECTS))}; this engine is {name!r}"
        )
    return get_dialect(core)


def core_dialect_of(dialect: sa.Dialect) -> Dialect:
    """The core dialect for an engine's dialect, or UnsupportedDatabase for a database or a
    driver the core's SQL is not written for (before anything is sent: never half working)."""
    core = core_dialect(dialect.name)
    if dialect.driver not in DRIVERS[dialect.name]:
        raise UnsupportedDatabase(
            f"dbqueue runs on {dialect.name} through {' or '.join(DRIVERS[dialect.name])} "
            f"only; this engine uses the {dialect.driver!r} driver. Use a URL like "
            f"{URLS[dialect.name]}"
        )
    return core


def _refuse_unsupported(target: Any, connection: sa.Connection, **kw: Any) -> None:
    core_dialect_of(connection.dialect)


def guard_ddl(*targets: sa.MetaData | sa.Table) -> None:
    """Refuse ``create_all``/``drop_all`` (and a queue table's own ``create``/``drop``) on a
    database dbqueue does not run on before their first statement, not halfway through."""
    for target in targets:
        for name in ("before_create", "before_drop"):
            if not sa.event.contains(target, name, _refuse_unsupported):
                sa.event.listen(target, name, _refuse_unsupported)


class now(FunctionElement[Any]):  # noqa: N801 - a SQL function, spelled like func.now
    """The database's current time as a column default: what Django's ``Now()`` writes
    (``statement_timestamp()`` on PostgreSQL, a text timestamp on SQLite)."""

    type = sa.DateTime(timezone=True)
    inherit_cache = True


@compiles(now, "postgresql")
def _now_postgresql(element: now, compiler: SQLCompiler, **kw: Any) -> str:
    return "statement_timestamp()"


@compiles(now, "sqlite")
def _now_sqlite(element: now, compiler: SQLCompiler, **kw: Any) -> str:
    return "(STRFTIME('%Y-%m-%d %H:%M:%f', 'NOW'))"


@compiles(now)
def _now_default(element: now, compiler: SQLCompiler, **kw: Any) -> str:
    return "CURRENT_TIMESTAMP"


class SQLiteJSON(sa.JSON):
    """JSON in a column declared ``TEXT`` on SQLite, as the core's DDL and Django declare it.

    SQLite gives a column declared ``JSON`` NUMERIC affinity, which turns the text of a JSON
    number into a number as it is stored (``5`` into an integer, ``1.0`` into 1, ``2**70`` into
    a float): the queue's codec, which decodes JSON text, then fails on the popped row, and
    the values lose their type.
    """


@compiles(SQLiteJSON, "sqlite")
def _json_sqlite(element: SQLiteJSON, compiler: Any, **kw: Any) -> str:
    return "TEXT"


class UTCDateTime(sa.types.TypeDecorator[dt.datetime]):
    """An aware DateTime on SQLite, which has no time zone type: stored as UTC text, as the
    core writes it, and read back in UTC. SQLAlchemy's own SQLite DateTime stores an aware
    value's wall-clock time without its offset and reads every value back naive."""

    impl = sa.DateTime
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: SADialect) -> Any:
        if value is not None and value.utcoffset() is not None:
            return value.astimezone(dt.UTC).replace(tzinfo=None)
        return value

    def process_result_value(self, value: Any, dialect: SADialect) -> dt.datetime | None:
        if isinstance(value, dt.datetime) and value.tzinfo is None:
            return value.replace(tzinfo=dt.UTC)
        return value  # type: ignore[no-any-return]


class SQLiteDecimal(sa.Numeric):  # type: ignore[type-arg]
    """Numeric declared ``decimal`` on SQLite, as the core's DDL and Django declare it
    (SQLAlchemy's ``NUMERIC(p, s)`` has the same affinity: the spelling is what differs, and
    schema comparisons, Alembic's autogenerate among them, compare spellings)."""


class SQLiteReal(sa.Float):  # type: ignore[type-arg]
    """Float declared ``real`` on SQLite, as the core's DDL and Django declare it (not
    ``FLOAT`` or ``DOUBLE``: the same REAL affinity)."""


#: What each of the above is declared as on SQLite. (A Boolean stays ``BOOLEAN``, not the
#: core's ``bool``: the same NUMERIC affinity, and SQLAlchemy reflects ``bool`` as BOOLEAN, so
#: Alembic's autogenerate would report a ``bool`` column as changed at every run.)
_SQLITE_SPELLINGS = {SQLiteDecimal: "decimal", SQLiteReal: "real"}


@compiles(SQLiteDecimal, "sqlite")
@compiles(SQLiteReal, "sqlite")
def _core_spelling_sqlite(element: sa.types.TypeEngine[Any], compiler: Any, **kw: Any) -> str:
    return _SQLITE_SPELLINGS[type(element)]


def _variants(typ: Any) -> dict[str, sa.types.TypeEngine[Any]]:
    """Dialect name -> the type a column of type ``typ`` gets there, so that create_all writes
    the core's DDL (``dbqueue.dialects.*.column_type``) with SQLAlchemy's own processing."""
    if isinstance(typ, sa.JSON):
        return {
            "sqlite": SQLiteJSON(none_as_null=typ.none_as_null),
            "postgresql": postgresql.JSONB(none_as_null=typ.none_as_null),
        }
    if isinstance(typ, sa.DateTime) and typ.timezone:
        return {"sqlite": UTCDateTime()}
    if isinstance(typ, sa.Float):
        # adapt() copies the declared arguments (precision, asdecimal, ...) to the variant.
        return {"sqlite": typ.adapt(SQLiteReal), "postgresql": typ.adapt(sa.Double)}
    if isinstance(typ, sa.Numeric):
        return {"sqlite": typ.adapt(SQLiteDecimal)}
    if isinstance(typ, sa.String) and typ.length is None and not isinstance(typ, sa.Text):
        # The core's 'text': a String() is 'VARCHAR' ('character varying' on PostgreSQL).
        return {name: sa.Text(collation=typ.collation) for name in DIALECTS}
    return {}


def dialect_types(table: sa.Table) -> None:
    """Give the table's columns the variants that make ``create_all`` write the core's column
    types (see :func:`_variants`; :class:`SQLiteJSON` and :class:`UTCDateTime` also store and
    read what the core writes), unless a column names its own variant for a dialect."""
    for column in table.columns:
        typ: Any = column.type
        for dialect, variant in _variants(typ).items():
            try:
                typ = typ.with_variant(variant, dialect)
            except ArgumentError:
                continue  # the declaration has a variant of its own for this dialect: keep it
        column.type = typ


def timestamp(*, nullable: bool, default: bool = False) -> sa.Column[Any]:
    """An aware timestamp column (``server_default`` the database's time when ``default``)."""
    return sa.Column(
        sa.DateTime(timezone=True), nullable=nullable, server_default=now() if default else None
    )


def small(default: int | None) -> sa.Column[Any]:
    """A NOT NULL smallint column, with a database default when given."""
    server = sa.text(str(default)) if default is not None else None
    return sa.Column(sa.SmallInteger(), nullable=False, server_default=server)


def refuse_taken(metadata: sa.MetaData, name: str, queue: str, what: str) -> None:
    """InvalidSpec if the table a queue generates (its ``what`` table, ``name``) is already
    in ``metadata``: another class or Table of the application has that name."""
    if name in metadata.tables:
        raise InvalidSpec(
            f"queue {queue!r}: its {what} table is named {name!r}, and a table of that name is "
            f"already declared in this MetaData; rename one of them (the queue's __tablename__, "
            f"or the other table)"
        )


def meta_table(spec: QueueSpec, data: sa.Table) -> sa.Table:
    """The split layout's meta table on ``data``'s MetaData, created after ``data``; for a
    consumer group's spec (:meth:`QueueSpec.for_group`) that group's meta table, which also
    keeps the group's own ``last_error`` (see :func:`group_tables`)."""
    columns: dict[str, sa.Column[Any]] = {
        "id": sa.Column(sa.BigInteger(), primary_key=True, autoincrement=False),
        "state": small(0),
        "priority": small(0),
        "run_at": timestamp(nullable=False, default=True),
        "attempts": small(0),
        "lease_until": timestamp(nullable=True),
    }
    unique = spec.options.is_unique
    if unique:
        columns[UNIQUE_KEY_COLUMN] = sa.Column(sa.Text(), nullable=True)
    if spec.group is not None:
        columns["last_error"] = sa.Column(sa.Text(), nullable=True)
    for name, column in columns.items():
        column.name = column.key = name
    what = "meta" if spec.group is None else f"consumer group {spec.group!r} meta"
    refuse_taken(data.metadata, spec.meta_table, spec.table, what)
    meta = sa.Table(spec.meta_table, data.metadata, *columns.values())
    c = meta.c
    sa.Index(
        spec.index_name("ready"), c.priority.desc(), c.run_at, c.id,
        postgresql_where=c.state == 0, sqlite_where=c.state == 0,
    )  # fmt: skip
    sa.Index(
        spec.index_name("leased"), c.lease_until,
        postgresql_where=c.state == 1, sqlite_where=c.state == 1,
    )  # fmt: skip
    if unique:
        unique_index(spec.index_name("unique"), meta, spec.options.unique_scope_mode)
    dialect_types(meta)
    # The tuning statements alter both tables: create the meta table last.
    meta.add_is_dependent_on(data)
    if spec.group is None:
        sa.event.listen(meta, "after_create", _run(lambda d: tuning_statements(spec, d)))
    else:  # the group's own table only: adding a group leaves the others as they are
        tuned = _run(lambda d: set_statements(storage_parameters(spec, d)[:1], d))
        sa.event.listen(meta, "after_create", tuned)
    return meta


def head_table(spec: QueueSpec, data: sa.Table) -> sa.Table:
    """The head table of a split queue's meta table (``<table>_head``; for a consumer group's
    spec, that group's, ``<table>_head_<group>``) on ``data``'s MetaData, as
    ``dbqueue.schema.head_statement`` creates it: a row per priority, with where its ready
    items begin in the meta table's ready index (:mod:`dbqueue.upkeep.heads`). Created empty;
    only the core's statements write it."""
    what = "head" if spec.group is None else f"consumer group {spec.group!r} head"
    refuse_taken(data.metadata, spec.head_table, spec.table, what)
    head = sa.Table(
        spec.head_table,
        data.metadata,
        sa.Column("priority", sa.SmallInteger(), primary_key=True, autoincrement=False),
        sa.Column("run_at", sa.DateTime(timezone=True), nullable=False),
    )
    dialect_types(head)
    return head


def group_tables(spec: QueueSpec, data: sa.Table) -> dict[str, sa.Table]:
    """A queue with consumer groups: each group's meta table ``<table>_meta_<group>`` (by
    group name) on ``data``'s MetaData, as ``dbqueue.schema.group_statements`` creates it,
    and the data table's storage parameters set after it is created (it has no
    ``<table>_meta`` whose creation would set them). Each group's head table is
    :func:`head_table`'s, made apart."""
    tables = {group: meta_table(spec.for_group(group), data) for group in spec.options.groups}
    data_tuning = _run(lambda d: set_statements(storage_parameters(spec, d)[-1:], d))
    sa.event.listen(data, "after_create", data_tuning)
    return tables


def unique_index(name: str, meta: sa.Table, scope: UniqueScope) -> sa.Index:
    """A unique queue's partial unique index on ``meta`` (which needs only its ``unique_key``
    and ``state`` columns): WHERE the core's ``index_predicate`` for ``scope``
    (``unique_key IS NOT NULL``, and for a scope but "stored", ``state IN (...)``)."""
    held: sa.ColumnElement[bool] = meta.c.unique_key.is_not(None)
    if scope is not UniqueScope.STORED:
        held = sa.and_(held, meta.c.state.in_([int(s) for s in scope.states]))
    return sa.Index(name, meta.c.unique_key, unique=True, postgresql_where=held, sqlite_where=held)


def failed_table(spec: QueueSpec, ring: sa.Table, payload: list[sa.Column[Any]]) -> sa.Table:
    """The ring layout's side table ``<table>_failed`` (failed messages, and those out of the
    ring for a while), with copies of the declared ``payload`` columns."""
    base: dict[str, sa.Column[Any]] = {
        "id": sa.Column(sa.BigInteger(), primary_key=True, autoincrement=False),
        "state": small(int(State.FAILED)),
        "attempts": sa.Column(sa.SmallInteger(), nullable=False),
        "pushed_at": timestamp(nullable=True),
        "failed_at": timestamp(nullable=False),
        "run_at": timestamp(nullable=True),
        "lease_until": timestamp(nullable=True),
        "last_error": sa.Column(sa.Text(), nullable=True),
    }
    for name, column in base.items():
        column.name = column.key = name
    copies = [sa.Column(c.name, c.type, nullable=c.nullable) for c in payload]
    what = "failed" if spec.group is None else f"consumer group {spec.group!r} side"
    refuse_taken(ring.metadata, spec.failed_table, spec.table, what)
    failed = sa.Table(spec.failed_table, ring.metadata, *base.values(), *copies)
    c = failed.c
    waiting = c.state != int(State.FAILED)
    sa.Index(
        spec.index_name("waiting"), c.state, c.run_at,
        postgresql_where=waiting, sqlite_where=waiting,
    )  # fmt: skip
    dialect_types(failed)
    return failed


def ring_group_tables(
    spec: QueueSpec, ring: sa.Table, payload: list[sa.Column[Any]]
) -> dict[str, tuple[sa.Table, sa.Table]]:
    """A ring with consumer groups: each group's state table ``<table>_ring_<group>`` (the
    slot columns without the payload, a row per slot) and side table ``<table>_side_<group>``,
    by group name, on ``ring``'s MetaData, as ``dbqueue.schema.group_ring_statements``
    creates them. After a state table is created: its storage parameters, its group's pop
    counter and its rows, read from the slot table (created first); the counter is dropped
    with it."""
    tables = {}
    for name in spec.options.groups:
        group = spec.for_group(name)
        refuse_taken(ring.metadata, group.state_table, spec.table, f"consumer group {name!r}")
        state = sa.Table(
            group.state_table,
            ring.metadata,
            *(_copy(c) for c in ring.c if c.name in RING_BASE_COLUMNS),
        )
        state.add_is_dependent_on(ring)
        fill = _run(lambda d, g=group: group_ring_fill_statements(g, d))
        sa.event.listen(state, "after_create", fill)
        drop = _run(lambda d, g=group: drop_group_counter_statements(g, d))
        sa.event.listen(state, "after_drop", drop)
        side = failed_table(group, ring, payload)
        side.add_is_dependent_on(ring)
        tables[name] = (state, side)
    return tables


def _copy(column: sa.Column[Any]) -> sa.Column[Any]:
    """A slot column as a group's state table has it: type, nullability, server default,
    primary key (never an identity: slots are numbered by the ring)."""
    default = column.server_default
    return sa.Column(
        column.name,
        column.type,
        nullable=column.nullable,
        primary_key=column.primary_key,
        autoincrement=False,
        server_default=None if default is None else default.arg,  # type: ignore[attr-defined]
    )


def ring_events(spec: QueueSpec, ring: sa.Table) -> None:
    """Counters, storage parameters and slots after the slot table is created; the counters
    dropped with it."""
    sa.event.listen(ring, "after_create", _run(lambda d: ring_slot_statements(spec, d)))
    sa.event.listen(ring, "after_drop", _run(lambda d: drop_ring_counter_statements(spec, d)))


def _run(statements: Any) -> Any:
    """A DDL event listener running ``statements(core dialect)`` on the connection."""

    def listener(target: sa.Table, connection: sa.Connection, **kw: Any) -> None:
        for statement in statements(core_dialect_of(connection.dialect)):
            # Rendered from the validated spec only; no values to bind. exec_driver_sql with
            # no parameters, so psycopg leaves the statement's text as it is.
            connection.exec_driver_sql(statement)

    return listener
