"""Finding the queues of a database by their tables (``dbqueue_sa.discovery``): the split and
ring queues SQLAlchemy and the core create, their specs, and the tables that are not queues."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from dbqueue.message import State
from dbqueue.ring import RingQueue
from dbqueue.schema import (
    create_ring_statements,
    create_statements,
    drop_ring_statements,
    drop_statements,
)
from dbqueue.spec import Field, FieldKind, QueueOptions, QueueSpec
from dbqueue.split import SplitQueue
from dbqueue_sa.discovery import FoundQueue, declared, discover
from dbqueue_sa.executor import SAExecutor
from dbqueue_sa.tables import core_dialect
from tests.sqlalchemy.models import Job, Tick

pytestmark = pytest.mark.sqlalchemy

CORE_FIELDS = (Field("body", FieldKind.TEXT), Field("due", FieldKind.DATETIME, nullable=True))


def found_by_name(engine: sa.Engine) -> dict[str, FoundQueue]:
    with engine.connect() as connection:
        return {q.name: q for q in discover(connection)}


def test_the_queues_of_the_mapped_classes_are_found(backend: str, engine: sa.Engine) -> None:
    found = found_by_name(engine)
    job, tick = found["sa_job"], found["sa_tick"]
    assert (job.layout, tick.layout) == ("split", "ring")
    assert job.spec.field_names == Job.__queue_spec__.field_names
    assert tick.spec.field_names == Tick.__queue_spec__.field_names
    assert tick.spec.options.capacity == 8
    if backend == "postgresql":
        # PostgreSQL keeps every declared type; SQLite keeps some (a uuid is char(32) there).
        assert job.spec.fields == tuple(
            Field(f.name, f.kind, f.nullable, f.max_length, f.max_digits, f.decimal_places)
            for f in Job.__queue_spec__.fields
        )


def test_a_found_queue_counts_what_the_class_counts(engine: sa.Engine) -> None:
    with Session(engine) as session, session.begin():
        Job.queue.push_many(session, [{"name": "a"}, {"name": "b"}])
        Job.queue.push(session, name="later", delay=dt.timedelta(hours=1))
        Tick.queue.push_many(session, [{"symbol": "X", "price": Decimal(1)}] * 3)
    with engine.connect() as connection:
        found = {q.name: q for q in discover(connection)}
        for model in (Job, Tick):
            queue = found[model.__tablename__]
            with connection.begin():
                stats = queue.core(connection).stats(SAExecutor(connection))
            with Session(connection) as session:
                expected = model.queue.stats(session)
            for key in ("ready", "scheduled", "leased", "expired", "done", "failed"):
                assert getattr(stats, key) == expected[key], (model, key)
    assert (stats.ready, stats.capacity) == (3, 8)


@pytest.fixture
def core_queues(engine: sa.Engine) -> Iterator[tuple[QueueSpec, QueueSpec]]:
    """A split and a ring queue created by the core's DDL, not by SQLAlchemy."""
    dialect = core_dialect(engine.dialect.name)
    split = QueueSpec("core_split", CORE_FIELDS)
    ring = QueueSpec("core_ring", CORE_FIELDS, QueueOptions(capacity=5))
    with engine.begin() as connection:
        for statement in create_statements(split, dialect) + create_ring_statements(ring, dialect):
            connection.exec_driver_sql(statement)
    yield split, ring
    with engine.begin() as connection:
        for statement in drop_statements(split, dialect) + drop_ring_statements(ring, dialect):
            connection.exec_driver_sql(statement)


def test_queues_the_core_created_are_found(
    engine: sa.Engine, core_queues: tuple[QueueSpec, QueueSpec]
) -> None:
    split, ring = core_queues
    found = found_by_name(engine)
    for spec in (split, ring):
        queue = found[spec.table]
        assert queue.spec.field_names == ("body", "due")
        # A naive SQLite datetime column is taken as the aware one it holds.
        assert queue.spec.fields[1].kind is FieldKind.DATETIME
    assert found["core_ring"].spec.options.capacity == 5
    # A split queue's head table is neither a queue nor a part of one the CLI lists.
    assert not {name for name in found if name.endswith("_head")}
    with engine.connect() as connection:
        assert isinstance(found["core_split"].core(connection), SplitQueue)
        assert isinstance(found["core_ring"].core(connection), RingQueue)
        # The found queue's statements reach its head table (PostgreSQL's pops read it).
        core, ex = found["core_split"].core(connection), SAExecutor(connection)
        core.push(ex, {"body": "x", "due": None}, priority=2)
        assert [m.payload["body"] for m in core.pop_batch(ex, 5)] == ["x"]


@pytest.fixture
def lookalikes(engine: sa.Engine) -> Iterator[None]:
    """Tables named like a queue's, without a queue's columns, and a table of another name."""
    metadata = sa.MetaData()
    for name, columns in [
        ("notes", ["id", "enqueued_at", "last_error"]),
        ("notes_meta", ["id", "state"]),  # not the meta columns
        ("audit", ["slot", "seq"]),  # not the slot columns
        ("audit_failed", ["id", "attempts", "pushed_at", "failed_at", "last_error"]),
        ("plain", ["id"]),
    ]:
        sa.Table(name, metadata, *(sa.Column(c, sa.Integer()) for c in columns))
    metadata.create_all(engine)
    yield
    metadata.drop_all(engine)


@pytest.mark.usefixtures("lookalikes")
def test_tables_that_are_not_queues_are_left_alone(engine: sa.Engine) -> None:
    assert set(found_by_name(engine)) >= {"sa_job", "sa_tick"}
    assert not set(found_by_name(engine)) & {"notes", "notes_meta", "audit", "plain"}


def test_an_empty_database_has_no_queues(url: str) -> None:
    engine = sa.create_engine(url)
    with engine.connect() as connection:
        names = {q.name for q in discover(connection)}
    engine.dispose()
    assert not names & {"sa_job", "sa_tick"}


def test_declared_queues_use_the_classes(engine: sa.Engine) -> None:
    job, tick = declared([Tick, Job])  # by name
    assert (job.name, job.model, job.items) == ("sa_job", Job, Job.__queue_meta__)
    assert (tick.name, tick.items, tick.failed) == (
        "sa_tick",
        Tick.__table__,
        Tick.__queue_failed__,
    )
    with Session(engine) as session:
        assert tick.core(session.connection()) is Tick.queue.core(session)


def test_where_the_items_of_each_state_are(engine: sa.Engine) -> None:
    job, tick = declared([Job, Tick])
    assert len(job.in_state(None)) == len(job.in_state(State.DONE)) == 1
    assert tick.in_state(State.DONE) == []  # a ring keeps no done items
    slots, failed = tick.in_state(None)
    assert (slots.column.table, failed.column.table) == (Tick.__table__, Tick.__queue_failed__)
    assert tick.failed_items().column is Tick.__queue_failed__.c.id
    assert job.failed_items().column is Job.__queue_meta__.c.id
