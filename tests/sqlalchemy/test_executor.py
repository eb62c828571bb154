"""``SAExecutor``: core statements on the Session's own connection, in its transaction. On SQLite
it begins with BEGIN IMMEDIATE (pysqlite would run a WITH ... UPDATE pop in autocommit),
savepoints nest in the caller's transaction and roll back alone, missing tables become
QueueTableMissing; on PostgreSQL psycopg prepares the statements it runs often."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from dbqueue.errors import QueueTableMissing, UnsupportedDatabase
from dbqueue.message import State
from dbqueue_sa import QueueMixin
from dbqueue_sa.executor import SAExecutor
from dbqueue_sa.tables import core_dialect
from tests.sqlalchemy.models import Job

pytestmark = pytest.mark.sqlalchemy
sqlite_only = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


class Base(DeclarativeBase):
    pass


class Coded(QueueMixin, Base):
    """A queue whose payload is unique, so the database can refuse a push."""

    __tablename__ = "ex_coded"
    code: Mapped[str] = mapped_column(sa.String(10), unique=True)


@pytest.fixture
def coded(engine: sa.Engine) -> Iterator[sa.Engine]:
    Base.metadata.create_all(engine)
    yield engine
    Base.metadata.drop_all(engine)


def states(engine: sa.Engine) -> list[int]:
    """The states in the meta table, as another connection sees them."""
    with engine.connect() as conn:
        return list(conn.exec_driver_sql("SELECT state FROM sa_job_meta ORDER BY id").scalars())


def codes(engine: sa.Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.exec_driver_sql("SELECT code FROM ex_coded ORDER BY id").scalars())


# -- transactions ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["transactional", "at_least_once"])
def test_a_pop_as_the_first_statement_rolls_back_with_the_session(
    engine: sa.Engine, mode: str
) -> None:
    with Session(engine) as session, session.begin():
        Job.queue.push_many(session, [{"name": "a"}, {"name": "b"}])
    with Session(engine) as session:
        # The pop is the transaction's first statement: on SQLite a WITH ... UPDATE, which
        # pysqlite would have run in autocommit without the executor's BEGIN IMMEDIATE.
        assert len(Job.queue.pop_batch(session, 2, mode=mode)) == 2
        session.rollback()
    assert states(engine) == [State.READY, State.READY]


@sqlite_only
def test_sqlite_takes_the_write_lock_at_the_first_statement(engine: sa.Engine) -> None:
    with Session(engine) as session, session.begin():
        Job.queue.push(session, name="a")
    other = sqlite3.connect(engine.url.database or "", timeout=0, isolation_level=None)
    try:
        with Session(engine) as session:
            Job.queue.stats(session)  # even a read begins IMMEDIATE: the pop that follows
            with pytest.raises(sqlite3.OperationalError, match="database is locked"):
                other.execute("BEGIN IMMEDIATE")
            session.rollback()
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
    finally:
        other.close()


@pytest.fixture
def savepoint_recipe(url: str) -> Iterator[sa.Engine]:
    """A SQLite engine set up as SQLAlchemy's docs advise for SAVEPOINT support: pysqlite's
    own transaction handling off, SQLAlchemy emitting BEGIN."""
    engine = sa.create_engine(url)

    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.isolation_level = None

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        conn.exec_driver_sql("BEGIN")

    yield engine
    engine.dispose()


@sqlite_only
def test_an_engine_that_begins_itself_is_left_to_it(
    engine: sa.Engine, savepoint_recipe: sa.Engine
) -> None:
    with Session(savepoint_recipe) as session:
        Job.queue.push(session, name="a")  # no BEGIN IMMEDIATE inside the engine's BEGIN
        session.commit()
        assert len(Job.queue.pop_batch(session, 1, mode="transactional")) == 1
        session.rollback()
    assert states(engine) == [State.READY]


# -- savepoints -----------------------------------------------------------------------------


def test_a_failed_batch_rolls_back_to_its_savepoint_only(coded: sa.Engine) -> None:
    with Session(coded) as session:
        Coded.queue.push(session, code="first")
        # Two batches run inside a savepoint; the database refuses the second.
        with pytest.raises(sa.exc.IntegrityError):
            Coded.queue.push_many(session, [{"code": "dup"}, {"code": "dup"}], batch_size=1)
        Coded.queue.push(session, code="second")  # the outer transaction goes on
        session.commit()
    assert codes(coded) == ["first", "second"]
    with Session(coded) as session:
        assert Coded.queue.stats(session)["ready"] == 2


def test_atomic_nests_in_the_callers_transaction(engine: sa.Engine) -> None:
    insert = "INSERT INTO sa_job_meta (id) VALUES ({})"
    with Session(engine) as session:
        ex = SAExecutor(session.connection())
        assert ex.in_transaction() and ex.dialect.name == engine.dialect.name
        with ex.atomic():  # the transaction's first statement: still not committed alone
            ex.execute(insert.format(1), {})
        with pytest.raises(RuntimeError), ex.atomic():
            ex.execute(insert.format(2), {})
            raise RuntimeError("undo 2")
        ex.execute(insert.format(3), {})
        assert states(engine) == []  # nothing committed yet
        session.commit()
    assert len(states(engine)) == 2
    with engine.connect() as conn:
        ids = conn.exec_driver_sql("SELECT id FROM sa_job_meta ORDER BY id").scalars().all()
    assert ids == [1, 3]


def test_atomic_released_then_the_session_rolled_back_leaves_nothing(engine: sa.Engine) -> None:
    with Session(engine) as session:
        ex = SAExecutor(session.connection())
        with ex.atomic():
            ex.execute("INSERT INTO sa_job_meta (id) VALUES (1)", {})
        session.rollback()
    assert states(engine) == []


def test_an_executor_that_commits_has_no_savepoints(engine: sa.Engine) -> None:
    with engine.connect() as conn, conn.begin():
        ex = SAExecutor(conn, commits=True)
        assert not ex.in_transaction()
        with ex.atomic():  # the operation's own transaction is the block
            ex.execute("INSERT INTO sa_job_meta (id) VALUES (1)", {})
    assert states(engine) == [State.READY]


# -- errors and drivers ---------------------------------------------------------------------


def test_a_missing_table_is_queue_table_missing_other_errors_pass(engine: sa.Engine) -> None:
    with Session(engine) as session:
        ex = SAExecutor(session.connection())
        with pytest.raises(QueueTableMissing) as missing:
            ex.execute("SELECT * FROM no_such_queue", {})
        assert "no_such_queue" in str(missing.value)
        assert isinstance(missing.value.__cause__, sa.exc.DBAPIError)
        session.rollback()
        ex = SAExecutor(session.connection())
        with pytest.raises(sa.exc.DBAPIError):
            ex.execute("SELECT no_such_column FROM sa_job", {})


def test_rows_come_back_as_tuples(engine: sa.Engine) -> None:
    with Session(engine) as session:
        ex = SAExecutor(session.connection())
        param = "%(v)s" if ex.dialect.name == "postgresql" else ":v"
        assert ex.execute(f"SELECT 1, {param}", {"v": "x"}) == [(1, "x")]
        assert ex.execute("DELETE FROM sa_job_meta", {}) == []


def test_an_unsupported_database_is_named() -> None:
    with pytest.raises(UnsupportedDatabase, match="postgresql, sqlite; this engine is 'mysql'"):
        core_dialect("mysql")


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_postgresql_prepares_the_statements_it_runs_often(engine: sa.Engine) -> None:
    with Session(engine) as session:
        for i in range(8):
            Job.queue.push(session, name=str(i))
        prepared = session.execute(
            sa.text("SELECT statement FROM pg_prepared_statements WHERE statement LIKE :s"),
            {"s": "%sa_job%"},
        ).scalars()
        assert any("INSERT" in s for s in prepared)
        session.rollback()


@pytest.mark.anyio
async def test_the_executor_waits_without_stopping_the_event_loop(async_engine: Any) -> None:
    """A ring push into a full ring waits with the executor's sleep: under run_sync it must
    give the loop back (a time.sleep would run the whole wait before any other task)."""
    import asyncio

    from sqlalchemy.ext.asyncio import AsyncSession

    order: list[str] = []

    async def other_task() -> None:
        order.append("other task")

    def wait(session: Session) -> None:
        SAExecutor(session.connection()).sleep(0.01)
        order.append("slept")

    async with AsyncSession(async_engine) as session:
        await session.connection()  # connected first: the sleep is the only wait below
        task = asyncio.create_task(other_task())
        await session.run_sync(wait)
        await task
    assert order == ["other task", "slept"]


def test_the_executor_sleeps_plainly_outside_asyncio(engine: sa.Engine) -> None:
    with Session(engine) as session:
        SAExecutor(session.connection()).sleep(0.001)  # no event loop: time.sleep
