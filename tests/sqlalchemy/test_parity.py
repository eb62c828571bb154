"""The Django migration, the SQLAlchemy metadata and the core DDL describe identical tables for
the same queue.

``tests.sqlalchemy.models.Job`` and ``Tick`` (tables ``sa_job``, ``sa_tick``) are created by
``Base.metadata.create_all`` in the database of each Django test alias (PostgreSQL as
``default``, SQLite as ``sqlite``), next to the migrated ``testapp_job`` and ``testapp_tick``
and to the core's DDL for the SQLAlchemy classes' own specs (``sa_core_job``, ``sa_core_tick``).
The three are compared as the database reports them, with the Django parity tests' helpers:
columns (nullability, normalised type, key, has a default), numeric defaults, the meta table's
partial indexes, the head table (columns and key), the key's sequence, the ring's slots and
counters, the failed tables and PostgreSQL's storage parameters. A class with a column of
every kind SQLAlchemy can declare (``Kinds``) is compared with the core's DDL for its spec the
same way, and so are the unique queues of each scope (``tests.sqlalchemy.unique_jobs``) with
their Django twins. A queue with consumer groups (``tests.sqlalchemy.fanout_jobs.Order``) is
compared with the core's DDL for its spec: its data table and each group's meta table, and
each group's head table with Django's FanoutJob's too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import decimal
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from django.db import connections
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from dbqueue.schema import (
    SCHEDULE_COLUMNS,
    SCHEDULE_TABLE,
    create_ring_statements,
    create_statements,
    drop_ring_statements,
    drop_statements,
    schedule_statements,
)
from dbqueue.spec import QueueSpec
from dbqueue_sa import JSONB, QueueMixin, schedule_table
from dbqueue_sa.tables import core_dialect
from tests.conformance.spec import JOB_FIELDS, JOB_OPTIONS
from tests.django.aliases import ALIASES
from tests.django.test_parity import (
    HEAD_INDEXES,
    UNIQUE_META_INDEXES,
    indexes,
    numeric_defaults,
    query,
)
from tests.django.test_parity import columns as django_columns
from tests.django.test_ring_parity import counter, slot_shape
from tests.django.testapp import models as django_models
from tests.sqlalchemy.fanout_jobs import GROUPS, FanoutBase, Order
from tests.sqlalchemy.models import Base, Job, Tick
from tests.sqlalchemy.ring_fanout_jobs import GROUPS as RING_GROUPS
from tests.sqlalchemy.ring_fanout_jobs import RingFanoutBase
from tests.sqlalchemy.ring_fanout_jobs import Tick as GroupedTick
from tests.sqlalchemy.unique_jobs import QueuedUniqueJob, StoredUniqueJob, UniqueBase, UniqueJob

#: Each unique queue class and its Django twin.
UNIQUE_TWINS = {
    UniqueJob: django_models.UniqueJob,
    QueuedUniqueJob: django_models.QueuedUniqueJob,
    StoredUniqueJob: django_models.StoredUniqueJob,
}

pytestmark = [
    pytest.mark.django,
    pytest.mark.sqlalchemy,
    pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
]

#: The tables of one queue: SQLAlchemy's, Django's and the core DDL's (see `tables`).
JOB = ("sa_job", "testapp_job", "sa_core_job")
TICK = ("sa_tick", "testapp_tick", "sa_core_tick")
KINDS = ("sa_kinds", "sa_core_kinds")
PG_ONLY = pytest.mark.parametrize("alias", ALIASES[:1])
#: The SQLAlchemy driver of each Django database engine the tests use.
DRIVERS = {
    "django.db.backends.postgresql": "postgresql+psycopg",
    "django.db.backends.sqlite3": "sqlite+pysqlite",
}


class KindsBase(DeclarativeBase):
    """A MetaData of its own: ``Kinds`` is created only by the test that compares it."""


class Kinds(QueueMixin, KindsBase):
    """A column of every kind, declared as SQLAlchemy users write them (plain ``Mapped[...]``
    annotations included)."""

    __tablename__ = KINDS[0]

    f_str: Mapped[str]
    f_varchar: Mapped[str] = mapped_column(sa.String(40))
    f_text: Mapped[str | None] = mapped_column(sa.Text())
    f_int: Mapped[int]
    f_small: Mapped[int] = mapped_column(sa.SmallInteger())
    f_big: Mapped[int] = mapped_column(sa.BigInteger())
    f_float: Mapped[float]
    f_double: Mapped[float] = mapped_column(sa.Double())
    f_decimal: Mapped[decimal.Decimal]
    f_numeric: Mapped[decimal.Decimal | None] = mapped_column(sa.Numeric(10, 3))
    f_bool: Mapped[bool]
    f_date: Mapped[dt.date]
    f_at: Mapped[dt.datetime] = mapped_column(sa.DateTime(timezone=True))
    f_json: Mapped[Any] = mapped_column(sa.JSON())
    f_jsonb: Mapped[Any] = mapped_column(JSONB)
    f_bytes: Mapped[bytes]
    f_uuid: Mapped[uuid.UUID]


@pytest.fixture(params=ALIASES)
def alias(request: pytest.FixtureRequest) -> str:
    """Each Django test database in turn (PostgreSQL, SQLite)."""
    return str(request.param)


def sa_url(alias: str) -> sa.URL:
    """The URL of Django's test database ``alias`` (its settings once the test database is
    set up, so ``NAME`` is the test database's)."""
    settings = connections[alias].settings_dict
    port = settings.get("PORT")
    return sa.URL.create(
        DRIVERS[settings["ENGINE"]],
        username=settings.get("USER") or None,
        password=settings.get("PASSWORD") or None,
        host=settings.get("HOST") or None,
        port=int(port) if port else None,
        database=settings["NAME"],
    )


@contextlib.contextmanager
def created(engine: sa.Engine, metadata: sa.MetaData, tables: list[Any]) -> Iterator[None]:
    """``tables`` by ``metadata.create_all``, dropped afterwards."""
    metadata.drop_all(engine, tables=tables)
    metadata.create_all(engine, tables=tables)
    yield
    metadata.drop_all(engine, tables=tables)


@contextlib.contextmanager
def core_ddl(engine: sa.Engine, *specs: QueueSpec) -> Iterator[None]:
    """The core's DDL for ``specs`` (split or ring), dropped afterwards."""
    dialect = core_dialect(engine.dialect.name)
    create: list[str] = []
    drop: list[str] = []
    for spec in specs:
        if spec.options.capacity is None:
            create += create_statements(spec, dialect)
            drop += drop_statements(spec, dialect)
        else:
            create += create_ring_statements(spec, dialect)
            drop += drop_ring_statements(spec, dialect)
    with engine.begin() as conn:
        for statement in create:
            conn.exec_driver_sql(statement)
    yield
    with engine.begin() as conn:
        for statement in drop:
            conn.exec_driver_sql(statement)


@pytest.fixture
def engine(alias: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(sa_url(alias))
    yield engine
    engine.dispose()


@pytest.fixture
def tables(engine: sa.Engine) -> Iterator[None]:
    """Job's and Tick's tables by ``Base.metadata.create_all``, and the core's DDL for their
    specs under the names ``sa_core_*``."""
    renamed = [
        dataclasses.replace(model.__queue_spec__, table=names[2])
        for model, names in ((Job, JOB), (Tick, TICK))
    ]
    ours = [
        Job.__table__, Job.__queue_meta__, Job.__queue_head__,
        Tick.__table__, Tick.__queue_failed__,
    ]  # fmt: skip
    with created(engine, Base.metadata, ours), core_ddl(engine, *renamed):
        yield


def same(describe: Callable[[str, str], Any], alias: str, names: tuple[str, ...]) -> Any:
    """``describe(alias, table)`` of each table named, asserted equal; returns it."""
    first, *others = [describe(alias, name) for name in names]
    for name, other in zip(names[1:], others, strict=True):
        assert other == first, f"{name} differs from {names[0]}"
    return first


def suffixed(names: tuple[str, ...], suffix: str) -> tuple[str, ...]:
    return tuple(f"{name}{suffix}" for name in names)


# -- the specs ------------------------------------------------------------------------------


def spec_of(model: Any) -> QueueSpec:
    return model.queue.spec  # type: ignore[no-any-return]


def test_the_specs_agree() -> None:
    job, tick = spec_of(Job), spec_of(Tick)
    assert job.fields == spec_of(django_models.Job).fields == JOB_FIELDS
    assert job.options == spec_of(django_models.Job).options == JOB_OPTIONS
    assert tick.fields == spec_of(django_models.Tick).fields
    assert tick.options == spec_of(django_models.Tick).options
    assert tick.options.capacity == 8


# -- the split queue ------------------------------------------------------------------------


@pytest.mark.usefixtures("tables")
def test_the_data_tables_agree(alias: str) -> None:
    found = same(columns, alias, JOB)
    assert set(found) == {"id", "enqueued_at", "last_error", *spec_of(Job).field_names}
    assert [name for name, (_null, _type, key, _default) in found.items() if key] == ["id"]


@pytest.mark.usefixtures("tables")
def test_the_meta_tables_agree(alias: str) -> None:
    meta = suffixed(JOB, "_meta")
    found = same(columns, alias, meta)
    assert set(found) == {"id", "state", "priority", "run_at", "attempts", "lease_until"}
    assert set(same(numeric_defaults, alias, meta)) == {"state", "priority", "attempts"}


@pytest.mark.usefixtures("tables")
def test_the_partial_indexes_agree(alias: str) -> None:
    assert set(same(indexes, alias, suffixed(JOB, "_meta"))) == {"pk", "ready", "leased"}


@pytest.mark.usefixtures("tables")
def test_the_head_tables_agree(alias: str) -> None:
    """``priority`` smallint, the key, and ``run_at`` an aware timestamp, both NOT NULL and
    without default: create_all's, Django's migration's and the core DDL's."""
    head = suffixed(JOB, "_head")
    assert_heads(alias, head)


def assert_heads(alias: str, names: tuple[str, ...]) -> None:
    """The head tables ``names`` agree (columns, their only index: the key) and are what the
    core's DDL says."""
    found = same(columns, alias, names)
    assert set(found) == {"priority", "run_at"}
    assert [name for name, (nullable, *_) in found.items() if nullable] == []
    assert [name for name, (*_, default) in found.items() if default] == []
    assert set(same(head_indexes, alias, names)) == HEAD_INDEXES
    shapes = same(constraint_shapes, alias, names)
    assert [cols for cols, primary_key, _unique in shapes if primary_key] == [["priority"]]


def head_indexes(alias: str, table: str) -> dict[str, tuple[Any, ...]]:
    return indexes(alias, table, HEAD_INDEXES)


@pytest.mark.usefixtures("tables")
def test_the_data_tables_have_no_other_index(alias: str) -> None:
    """Only the key: every extra index is a cost on every push."""
    assert same(index_names, alias, JOB) == (["<table>_pkey"] if alias == "default" else [])


@pytest.mark.usefixtures("tables")
def test_the_keys_agree(alias: str) -> None:
    """PostgreSQL: the identity's sequence (type, start, bounds, step, cycle); SQLite:
    AUTOINCREMENT, so an id is never reused after the newest message is acked."""
    found = same(key_sequence, alias, JOB)
    assert found == (("bigint", 1, 1, 2**63 - 1, 1, False) if alias == "default" else True)


@PG_ONLY
@pytest.mark.usefixtures("tables")
def test_the_storage_parameters_agree(alias: str) -> None:
    data = same(reloptions, alias, JOB)
    meta = same(reloptions, alias, suffixed(JOB, "_meta"))
    assert "autovacuum_vacuum_insert_scale_factor=0.05" in data
    assert "fillfactor=80" in meta


# -- the ring -------------------------------------------------------------------------------


@pytest.mark.usefixtures("tables")
def test_the_slot_tables_agree(alias: str) -> None:
    assert set(same(columns, alias, TICK)) == {
        "slot", "seq", "state", "attempts", "pushed_at", "lease_until", "last_error",
        *spec_of(Tick).field_names,
    }  # fmt: skip
    assert set(same(numeric_defaults, alias, TICK)) == {"state", "attempts"}


@pytest.mark.usefixtures("tables")
def test_the_slots_and_their_key_agree(alias: str) -> None:
    assert same(slot_shape, alias, TICK) == (8, {0}, {0})
    shapes = same(constraint_shapes, alias, TICK)
    assert [cols for cols, primary_key, _unique in shapes if primary_key] == [["slot"]]


@pytest.mark.usefixtures("tables")
def test_the_failed_tables_agree(alias: str) -> None:
    found = same(columns, alias, suffixed(TICK, "_failed"))
    assert {name for name, (nullable, *_) in found.items() if nullable} == {
        "pushed_at", "run_at", "lease_until", "last_error", "note",
    }  # fmt: skip


@pytest.mark.usefixtures("tables")
def test_the_counters_agree(alias: str) -> None:
    for suffix in ("_push_seq", "_pop_seq"):
        same(counter, alias, suffixed(TICK, suffix))


@PG_ONLY
@pytest.mark.usefixtures("tables")
def test_the_ring_storage_parameters_agree(alias: str) -> None:
    assert any(o.startswith("fillfactor=") for o in same(reloptions, alias, TICK))
    same(reloptions, alias, suffixed(TICK, "_failed"))


# -- unique queues ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "django_table"),
    [
        (UniqueJob, "testapp_uniquejob"),
        (QueuedUniqueJob, "testapp_queueduniquejob"),
        (StoredUniqueJob, "testapp_storeduniquejob"),
    ],
    ids=["unfinished", "queued", "stored"],
)
def test_the_unique_queues_agree(
    alias: str, engine: sa.Engine, model: Any, django_table: str
) -> None:
    """A unique queue's meta table (its key column, its partial unique index over the scope's
    states) as create_all, Django's migration and the core's DDL make it."""
    assert spec_of(model).options == spec_of(UNIQUE_TWINS[model]).options
    names = (model.__tablename__, django_table, f"sa_core_{model.__tablename__}")
    core = dataclasses.replace(spec_of(model), table=names[2])
    ours = [model.__table__, model.__queue_meta__, model.__queue_head__]
    with created(engine, UniqueBase.metadata, ours), core_ddl(engine, core):
        same(columns, alias, names)
        assert "unique_key" in same(columns, alias, suffixed(names, "_meta"))
        found = same(unique_indexes, alias, suffixed(names, "_meta"))
        assert set(found) == UNIQUE_META_INDEXES
        assert_heads(alias, suffixed(names, "_head"))


def unique_indexes(alias: str, table: str) -> dict[str, tuple[Any, ...]]:
    return indexes(alias, table, UNIQUE_META_INDEXES)


# -- consumer groups, against the core's DDL ------------------------------------------------


def test_a_grouped_queue_matches_the_core_ddl(alias: str, engine: sa.Engine) -> None:
    """The data table and each group's meta table (with its own ``last_error``, partial
    indexes and, on PostgreSQL, storage parameters) and head table as create_all and the
    core's DDL make them, and as Django's migration makes FanoutJob's; no ``<table>_meta``,
    no ``<table>_head``."""
    names = (Order.__tablename__, f"sa_core_{Order.__tablename__}")
    core = dataclasses.replace(spec_of(Order), table=names[1])
    ours = [
        Order.__table__,
        *Order.__queue_group_tables__.values(),
        *Order.__queue_group_heads__.values(),
    ]
    with created(engine, FanoutBase.metadata, ours), core_ddl(engine, core):
        same(columns, alias, names)
        for group in GROUPS:
            group_names = suffixed(names, f"_meta_{group}")
            found = same(columns, alias, group_names)
            assert "last_error" in found
            assert set(same(numeric_defaults, alias, group_names)) == {
                "state", "priority", "attempts",
            }  # fmt: skip
            assert set(same(indexes, alias, group_names)) == {"pk", "ready", "leased"}
            if alias == "default":
                assert "fillfactor=80" in same(reloptions, alias, group_names)
            assert_heads(
                alias, (*suffixed(names, f"_head_{group}"), f"testapp_fanoutjob_head_{group}")
            )
        if alias == "default":
            data = same(reloptions, alias, names)
            assert "autovacuum_vacuum_insert_scale_factor=0.05" in data
        assert not sa.inspect(engine).has_table(f"{names[0]}_meta")
        assert not sa.inspect(engine).has_table(f"{names[0]}_head")


def test_a_grouped_ring_matches_the_core_ddl(alias: str, engine: sa.Engine) -> None:
    """The slot and side tables and each group's state table (its rows, their defaults, its
    key, and on PostgreSQL its storage parameters) and side table as create_all and the
    core's DDL make them."""
    names = (GroupedTick.__tablename__, f"sa_core_{GroupedTick.__tablename__}")
    core = dataclasses.replace(spec_of(GroupedTick), table=names[1])
    ours = [
        GroupedTick.__table__, GroupedTick.__queue_failed__,
        *GroupedTick.__queue_group_tables__.values(), *GroupedTick.__queue_group_failed__.values(),
    ]  # fmt: skip
    with created(engine, RingFanoutBase.metadata, ours), core_ddl(engine, core):
        same(columns, alias, names)
        same(columns, alias, suffixed(names, "_failed"))
        for group in RING_GROUPS:
            state = suffixed(names, f"_ring_{group}")
            assert set(same(columns, alias, state)) == {
                "slot", "seq", "state", "attempts", "pushed_at", "lease_until", "last_error",
            }  # fmt: skip
            assert set(same(numeric_defaults, alias, state)) == {"state", "attempts"}
            same(columns, alias, suffixed(names, f"_side_{group}"))
            if alias == "default":
                assert "fillfactor=50" in same(reloptions, alias, state)
            with engine.connect() as conn:
                for table in state:
                    assert conn.scalar(sa.text(f'SELECT count(*) FROM "{table}"')) == 4


# -- every kind, against the core's DDL -----------------------------------------------------


def test_every_kind_matches_the_core_ddl(alias: str, engine: sa.Engine) -> None:
    core = dataclasses.replace(spec_of(Kinds), table=KINDS[1])
    ours = [Kinds.__table__, Kinds.__queue_meta__, Kinds.__queue_head__]
    with created(engine, KindsBase.metadata, ours), core_ddl(engine, core):
        found = same(columns, alias, KINDS)
        assert set(found) == {"id", "enqueued_at", "last_error", *core.field_names}
        same(columns, alias, suffixed(KINDS, "_meta"))


# -- how the database describes a table, beyond tests/django/test_parity.py -----------------


def columns(alias: str, table: str) -> dict[str, tuple[Any, ...]]:
    """Django's parity view of the columns, with SQLite's ``BOOLEAN`` read as ``bool``: the
    same NUMERIC affinity, and the one spelling the adapter keeps on purpose (SQLAlchemy
    reflects ``bool`` as BOOLEAN, so Alembic's autogenerate would report a column declared
    ``bool`` as changed at every run)."""
    found = django_columns(alias, table)
    if alias == "default":
        return found
    return {
        name: (nullable, "bool" if typ == "boolean" else typ, *rest)
        for name, (nullable, typ, *rest) in found.items()
    }


def index_names(alias: str, table: str) -> list[str]:
    """The table's indexes (PostgreSQL's, with the table's name as ``<table>``)."""
    if alias == "default":
        sql = "SELECT indexname FROM pg_indexes WHERE tablename = %s ORDER BY indexname"
        return [name.replace(table, "<table>") for (name,) in query(alias, sql, [table])]
    return [row[1] for row in query(alias, f'PRAGMA index_list("{table}")')]


def key_sequence(alias: str, table: str) -> tuple[Any, ...] | bool:
    """PostgreSQL: how the ``id`` column's sequence is defined; SQLite: AUTOINCREMENT."""
    if alias == "default":
        (row,) = query(
            alias,
            "SELECT seqtypid::regtype::text, seqstart, seqmin, seqmax, seqincrement, seqcycle "
            "FROM pg_sequence WHERE seqrelid = pg_get_serial_sequence(%s, 'id')::regclass",
            [table],
        )
        return tuple(row)
    ((sql,),) = query(alias, "SELECT sql FROM sqlite_master WHERE name = %s", [table])
    return "AUTOINCREMENT" in sql.upper()


def reloptions(alias: str, table: str) -> list[str]:
    """PostgreSQL's storage parameters of the table, sorted."""
    ((options,),) = query(alias, "SELECT reloptions FROM pg_class WHERE relname = %s", [table])
    return sorted(options or [])


def constraint_shapes(alias: str, table: str) -> list[tuple[Any, ...]]:
    """(columns, primary key, unique) of the table's constraints and indexes, as Django's
    introspection reports them (their names differ by design)."""
    connection = connections[alias]
    with connection.cursor() as cursor:
        found = connection.introspection.get_constraints(cursor, table)
    return sorted((c["columns"], c["primary_key"], c["unique"]) for c in found.values())


# -- the schedule table ---------------------------------------------------------------------


def test_the_schedule_tables_agree(engine: sa.Engine, alias: str) -> None:
    """Django's migrated ``dbqueue_schedule``, ``schedule_table``'s and the core DDL's, the
    last two created under other names."""
    names = (SCHEDULE_TABLE, "sa_schedule", "core_schedule")
    metadata = sa.MetaData()
    ours = schedule_table(sa.MetaData()).to_metadata(metadata, name=names[1])
    quoted = f'"{SCHEDULE_TABLE}"'
    (core,) = schedule_statements(core_dialect(engine.dialect.name))
    with created(engine, metadata, [ours]):
        with engine.begin() as conn:
            conn.exec_driver_sql(core.replace(quoted, f'"{names[2]}"', 1))
        try:
            found = same(django_columns, alias, names)
        finally:
            with engine.begin() as conn:
                conn.exec_driver_sql(f'DROP TABLE "{names[2]}"')
    assert tuple(found) == SCHEDULE_COLUMNS
