"""``metadata.create_all()`` / ``drop_all()`` of the queue classes, on real PostgreSQL and SQLite:
the same tables as the core's DDL (``dbqueue.schema``, created beside them under another
name), the split queue's head table, the partial indexes, SQLite's AUTOINCREMENT, the ring's
preallocated slots and counters, PostgreSQL's storage parameters; drop_all leaves no counter
behind; create_all twice changes nothing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from dbqueue.dialects import get_dialect
from dbqueue.schema import (
    create_ring_statements,
    create_statements,
    drop_ring_statements,
    drop_statements,
)
from dbqueue.spec import QueueSpec
from dbqueue_sa import QueueMixin
from dbqueue_sa.tables import UTCDateTime
from tests.sqlalchemy.models import Base, Job, Tick

pytestmark = pytest.mark.sqlalchemy

CORE = "core_twin"  # the core DDL's copy of a queue, beside the SQLAlchemy one


def execute(engine: sa.Engine, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.text(sql), params)]


def twin(engine: sa.Engine, spec: QueueSpec) -> Iterator[QueueSpec]:
    """The core's DDL for ``spec`` under the name CORE, dropped afterwards."""
    core = dataclasses.replace(spec, table=CORE)
    dialect = get_dialect(engine.dialect.name)
    ring = spec.options.capacity is not None
    create = create_ring_statements if ring else create_statements
    with engine.begin() as conn:
        for statement in create(core, dialect):
            conn.exec_driver_sql(statement)
    yield core
    drop = drop_ring_statements(core, dialect) if ring else drop_statements(core, dialect)
    with engine.begin() as conn:
        for statement in drop:
            conn.exec_driver_sql(statement)


@pytest.fixture
def core_job(engine: sa.Engine) -> Iterator[QueueSpec]:
    yield from twin(engine, Job.__queue_spec__)


@pytest.fixture
def core_tick(engine: sa.Engine) -> Iterator[QueueSpec]:
    yield from twin(engine, Tick.__queue_spec__)


def affinity(declared: str) -> str:
    """SQLite's type affinity of a declared column type (sqlite.org/datatype3.html, 3.1)."""
    t = declared.upper()
    if "INT" in t:
        return "INTEGER"
    if any(s in t for s in ("CHAR", "CLOB", "TEXT")):
        return "TEXT"
    if "BLOB" in t or not t:
        return "BLOB"
    if any(s in t for s in ("REAL", "FLOA", "DOUB")):
        return "REAL"
    return "NUMERIC"


def columns(engine: sa.Engine, table: str) -> dict[str, tuple[Any, ...]]:
    """What a column stores, by name: PostgreSQL's exact type, nullability and default (an
    identity column has none); on SQLite the type's affinity, NOT NULL, default and key."""
    if engine.dialect.name == "sqlite":
        rows = execute(engine, f'PRAGMA table_info("{table}")')
        return {r[1]: (affinity(r[2]), r[3], r[4], r[5]) for r in rows}
    rows = execute(
        engine,
        "SELECT column_name, data_type, character_maximum_length, numeric_precision, "
        "numeric_scale, is_nullable, column_default, is_identity FROM information_schema.columns "
        "WHERE table_name = :t",
        t=table,
    )
    return {r[0]: r[1:] for r in rows}


def indexes(engine: sa.Engine, spec: QueueSpec, table: str) -> list[Any]:
    """The table's indexes with the queue's names replaced by placeholders."""

    def anonymous(text: str) -> str:
        ix, base = spec.index_name(""), spec.table
        return text.replace(ix, "<ix>_").replace(f"{base}_", "<t>_").replace(base, "<t>")

    if engine.dialect.name == "sqlite":
        rows = execute(engine, f'PRAGMA index_list("{table}")')
        out = []
        for _, name, unique, origin, partial in sorted(rows, key=lambda r: r[1]):
            xinfo = execute(engine, f'PRAGMA index_xinfo("{name}")')
            keys = [(r[2], r[3]) for r in xinfo if r[5]]  # (column, desc) of the key columns
            out.append((anonymous(name), unique, origin, partial, keys))
        return out
    rows = execute(
        engine, "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = :t", t=table
    )
    return sorted(anonymous(d) for _, d in rows)


def reloptions(engine: sa.Engine, table: str) -> list[str]:
    (row,) = execute(engine, "SELECT reloptions FROM pg_class WHERE relname = :t", t=table)
    return sorted(row[0] or [])


def table_names(engine: sa.Engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names())


# -- the split layout -------------------------------------------------------------------------


def test_split_tables_match_the_core_ddl(engine: sa.Engine, core_job: QueueSpec) -> None:
    spec = Job.__queue_spec__
    for ours, theirs in (
        (spec.table, core_job.table),
        (spec.meta_table, core_job.meta_table),
        (spec.head_table, core_job.head_table),
    ):
        assert columns(engine, ours) == columns(engine, theirs), ours
        assert indexes(engine, spec, ours) == indexes(engine, core_job, theirs), ours


def test_create_all_makes_the_head_table(engine: sa.Engine) -> None:
    """``<table>_head``: ``priority`` smallint, its key (no identity, no default), ``run_at``
    an aware timestamp; both NOT NULL. Empty."""
    head = Job.__queue_head__
    assert head.name == Job.__queue_spec__.head_table == "sa_job_head"
    assert Base.metadata.tables["sa_job_head"] is head
    found = columns(engine, head.name)
    if engine.dialect.name == "sqlite":
        assert found == {"priority": ("INTEGER", 1, None, 1), "run_at": ("NUMERIC", 1, None, 0)}
        (sql,) = execute(engine, "SELECT sql FROM sqlite_master WHERE name = 'sa_job_head'")[0]
        assert "run_at DATETIME NOT NULL" in sql
    else:
        assert found == {
            "priority": ("smallint", None, 16, 0, "NO", None, "NO"),
            "run_at": ("timestamp with time zone", None, None, None, "NO", None, "NO"),
        }
    assert execute(engine, "SELECT count(*) FROM sa_job_head") == [(0,)]


def test_the_meta_table_has_the_two_partial_indexes(engine: sa.Engine) -> None:
    spec = Job.__queue_spec__
    if engine.dialect.name == "sqlite":
        rows = execute(engine, "SELECT name, sql FROM sqlite_master WHERE type = 'index'")
        sql = dict(rows)
        assert sql[spec.index_name("ready")].endswith("(priority DESC, run_at, id) WHERE state = 0")
        assert sql[spec.index_name("leased")].endswith("(lease_until) WHERE state = 1")
        return
    assert indexes(engine, spec, spec.meta_table) == [
        "CREATE INDEX <ix>_leased ON public.<t>_meta USING btree (lease_until) WHERE (state = 1)",
        "CREATE INDEX <ix>_ready ON public.<t>_meta USING btree (priority DESC, run_at, id) "
        "WHERE (state = 0)",
        "CREATE UNIQUE INDEX <t>_meta_pkey ON public.<t>_meta USING btree (id)",
    ]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_sqlite_ids_are_never_reused(engine: sa.Engine) -> None:
    (sql,) = execute(engine, "SELECT sql FROM sqlite_master WHERE name = 'sa_job'")[0]
    assert "PRIMARY KEY AUTOINCREMENT" in sql
    with Session(engine) as session, session.begin():
        first = Job.queue.push_many(session, [{"name": "a"}, {"name": "b"}])
        Job.queue.delete(session, first)
    with Session(engine) as session, session.begin():
        assert Job.queue.push(session, name="c") == first[-1] + 1


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_postgresql_storage_parameters(engine: sa.Engine, core_job: QueueSpec) -> None:
    spec = Job.__queue_spec__
    assert "fillfactor=80" in reloptions(engine, spec.meta_table)
    assert "autovacuum_vacuum_insert_scale_factor=0.05" in reloptions(engine, spec.table)
    assert reloptions(engine, spec.meta_table) == reloptions(engine, core_job.meta_table)
    assert reloptions(engine, spec.table) == reloptions(engine, core_job.table)


def test_timestamps_read_back_aware(engine: sa.Engine) -> None:
    """The ORM reads the queue's timestamps in UTC on SQLite too, as the core does."""
    at = dt.datetime(2030, 1, 2, 3, 4, 5, 6, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    with Session(engine) as session, session.begin():
        Job.queue.push(session, name="a", at=at)
    with Session(engine) as session:
        job, _, _, _, run_at, _ = session.execute(Job.queue.items()).one()
        assert job.at == at and job.at.utcoffset() is not None
        assert job.enqueued_at.utcoffset() is not None and run_at.utcoffset() is not None
        # A bound aware datetime compares in UTC too.
        later = sa.select(sa.func.count()).where(Job.at > at - dt.timedelta(microseconds=1))
        assert session.scalar(later) == 1


@pytest.mark.parametrize("doc", [5, 1.0, 2**70, "12", "x", True, [1, "2"], {"a": 1.5}])
def test_json_values_keep_their_type(engine: sa.Engine, doc: Any) -> None:
    """On SQLite a column declared JSON has NUMERIC affinity, which would store the text of a
    JSON number as a number: the queue's columns are declared TEXT there, as the core's are."""
    with Session(engine) as session, session.begin():
        Job.queue.push(session, name="a", doc=doc)
    with Session(engine) as session:
        (stored,) = session.scalars(sa.select(Job.doc))
        (popped,) = Job.queue.pop_batch(session, mode="transactional")
        for value in (stored, popped.doc):
            assert (type(value), value) == (type(doc), doc)


def test_a_declared_sqlite_variant_is_kept() -> None:
    class Local(DeclarativeBase):
        pass

    class Texty(QueueMixin, Local):
        __tablename__ = "tables_texty"
        doc: Mapped[Any] = mapped_column(sa.JSON().with_variant(sa.Text(), "sqlite"))
        at: Mapped[dt.datetime] = mapped_column(sa.DateTime(timezone=True))

    sqlite = sqlite_dialect.dialect()
    columns = Texty.__table__.c
    assert type(columns.doc.type.dialect_impl(sqlite)) is sa.Text
    assert isinstance(columns.at.type.dialect_impl(sqlite), UTCDateTime)
    ours = Job.__table__.c.doc
    assert isinstance(ours, sa.Column)
    assert isinstance(ours.type.dialect_impl(sqlite), sa.JSON)
    assert str(sa.schema.CreateColumn(ours).compile(dialect=sqlite)) == "doc TEXT"


# -- the ring layout --------------------------------------------------------------------------


def test_ring_tables_match_the_core_ddl(engine: sa.Engine, core_tick: QueueSpec) -> None:
    spec = Tick.__queue_spec__
    for ours, theirs in (
        (spec.table, core_tick.table),
        (spec.failed_table, core_tick.failed_table),
    ):
        assert columns(engine, ours) == columns(engine, theirs), ours
        assert indexes(engine, spec, ours) == indexes(engine, core_tick, theirs), ours


def slots(engine: sa.Engine) -> list[tuple[int, int, int]]:
    return execute(engine, "SELECT slot, seq, state FROM sa_tick ORDER BY slot")


def counters(engine: sa.Engine, spec: QueueSpec) -> list[Any]:
    """The ring's push and pop counters: PostgreSQL sequences, one-row tables on SQLite."""
    if engine.dialect.name == "sqlite":
        names = table_names(engine) & {spec.push_seq, spec.pop_seq}
        return sorted((n, execute(engine, f'SELECT value FROM "{n}"')) for n in names)
    return execute(
        engine,
        "SELECT sequencename, data_type::text, start_value, min_value FROM pg_sequences "
        "WHERE sequencename IN (:push, :pop) ORDER BY sequencename",
        push=spec.push_seq,
        pop=spec.pop_seq,
    )


def test_the_ring_is_created_with_its_slots_and_counters(
    engine: sa.Engine, core_tick: QueueSpec
) -> None:
    spec = Tick.__queue_spec__
    assert slots(engine) == [(s, s - 8, 0) for s in range(8)]
    got = counters(engine, spec)
    assert len(got) == 2
    core = counters(engine, core_tick)
    assert [row[1:] for row in got] == [row[1:] for row in core]
    if engine.dialect.name == "postgresql":
        assert got[0][1:] == ("bigint", 0, 0)
        assert "fillfactor=10" in reloptions(engine, spec.table)
        assert reloptions(engine, spec.table) == reloptions(engine, core_tick.table)
        padding = execute(engine, "SELECT DISTINCT last_error FROM sa_tick")
        assert padding == execute(engine, f"SELECT DISTINCT last_error FROM {CORE}")
    else:
        assert got[0][1] == [(0,)]
        # An index on seq turns SQLite's pop into a range scan (the core creates it too).
        assert [i[0] for i in indexes(engine, spec, spec.table)] == ["<ix>_seq"]


def test_drop_all_removes_the_counters(engine: sa.Engine) -> None:
    spec = Tick.__queue_spec__
    Base.metadata.drop_all(engine)
    assert not table_names(engine) & {
        "sa_job", "sa_job_meta", "sa_job_head", "sa_tick", "sa_tick_failed",
    }  # fmt: skip
    assert counters(engine, spec) == []
    if engine.dialect.name == "postgresql":
        left = execute(
            engine, "SELECT sequencename FROM pg_sequences WHERE sequencename LIKE 'sa_%'"
        )
        assert left == []
    else:
        assert table_names(engine) == set()


def test_create_all_twice_changes_nothing(engine: sa.Engine) -> None:
    with Session(engine) as session, session.begin():
        job = Job.queue.push(session, name="kept")
        tick = Tick.queue.push(session, symbol="A", price=1)
    Base.metadata.create_all(engine)
    assert len(slots(engine)) == 8
    with Session(engine) as session, session.begin():
        assert Job.queue.stats(session)["ready"] == Tick.queue.stats(session)["ready"] == 1
        assert Job.queue.push(session, name="next") == job + 1
        assert Tick.queue.push(session, symbol="B", price=2) == tick + 1
        Tick.queue.check(session)


def test_drop_and_create_again_starts_over(engine: sa.Engine) -> None:
    with Session(engine) as session, session.begin():
        Tick.queue.push_many(session, [{"symbol": "A", "price": 1}] * 3)
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    assert slots(engine) == [(s, s - 8, 0) for s in range(8)]
    with Session(engine) as session, session.begin():
        assert Tick.queue.push(session, symbol="B", price=2) == 0
