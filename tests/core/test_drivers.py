"""The bare-connection executors: transaction state, missing tables, SQLite savepoints, the
SQLite connection setup and version check. Real databases only."""

from __future__ import annotations

import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

from dbqueue import Field, FieldKind, QueueSpec, SplitQueue, get_dialect
from dbqueue.dialects.sqlite import MIN_VERSION, check_version
from dbqueue.drivers import executor_for
from dbqueue.drivers.psycopg import PsycopgExecutor
from dbqueue.drivers.sqlite import SqliteExecutor, connect
from dbqueue.errors import QueueTableMissing, UnsupportedDatabase
from dbqueue.schema import create_statements

FIELDS = (Field("body", FieldKind.TEXT),)

# -- psycopg: transaction state -----------------------------------------------------------------


@pytest.mark.postgresql
def test_autocommit_idle_connection_is_not_in_a_transaction(pg_conn: psycopg.Connection) -> None:
    ex = PsycopgExecutor(pg_conn)
    assert pg_conn.autocommit
    assert ex.in_transaction() is False
    ex.execute("SELECT 1", {})
    assert ex.in_transaction() is False  # each statement committed on its own


@pytest.mark.postgresql
def test_inside_conn_transaction_is_in_a_transaction(pg_conn: psycopg.Connection) -> None:
    ex = PsycopgExecutor(pg_conn)
    with pg_conn.transaction():
        assert ex.in_transaction() is True
        with pg_conn.transaction():  # a savepoint
            assert ex.in_transaction() is True
    assert ex.in_transaction() is False


@pytest.mark.postgresql
def test_a_non_autocommit_connection_is_always_in_a_transaction(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        ex = PsycopgExecutor(conn)
        assert ex.in_transaction() is True  # the next statement opens one implicitly
        ex.execute("SELECT 1", {})
        assert ex.in_transaction() is True
        conn.commit()
        assert ex.in_transaction() is True


@pytest.mark.postgresql
def test_psycopg_execute_returns_rows_or_nothing(pg_conn: psycopg.Connection) -> None:
    ex = PsycopgExecutor(pg_conn)
    assert ex.execute("SELECT %(a)s::int + 1, %(b)s::text", {"a": 41, "b": "x"}) == [(42, "x")]
    assert ex.execute("SET application_name = 'dbqueue-test'", {}) == []
    for _ in range(8):  # prepared after a few runs: results stay the same
        assert ex.execute("SELECT %(a)s::int * 2", {"a": 21}) == [(42,)]


@pytest.mark.postgresql
def test_a_psycopg_executor_shared_by_threads_keeps_their_results_apart(pg_dsn: str) -> None:
    # The executor reuses a cursor per thread; a shared cursor would hand one thread's rows
    # to another.
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        ex = PsycopgExecutor(conn)

        def work(k: int) -> bool:
            return all(
                ex.execute("SELECT %(k)s::int, %(i)s::int", {"k": k, "i": i}) == [(k, i)]
                for i in range(200)
            )

        with ThreadPoolExecutor(4) as pool:
            assert all(pool.map(work, range(8)))


@pytest.mark.postgresql
def test_psycopg_executor_binds_on_the_server_whatever_the_cursor_factory(pg_dsn: str) -> None:
    # Django installs ClientCursor; the executor must still bind server-side.
    with psycopg.connect(pg_dsn, autocommit=True, cursor_factory=psycopg.ClientCursor) as conn:
        ex = PsycopgExecutor(conn)
        assert ex.execute("SELECT %(s)s::text", {"s": "it's; DROP"}) == [("it's; DROP",)]


@pytest.mark.sqlite
def test_executor_for_picks_the_driver(sqlite_conn: sqlite3.Connection) -> None:
    assert isinstance(executor_for(get_dialect("sqlite"), sqlite_conn), SqliteExecutor)
    assert executor_for(get_dialect("sqlite"), sqlite_conn).dialect.name == "sqlite"


def test_an_unknown_dialect_is_unsupported() -> None:
    with pytest.raises(UnsupportedDatabase, match=r"'oracle'.*postgresql, sqlite"):
        get_dialect("oracle")


# -- missing tables -----------------------------------------------------------------------------


def _connection(backend: str, request: pytest.FixtureRequest) -> Any:
    if backend == "postgresql":
        return request.getfixturevalue("pg_conn")
    return request.getfixturevalue("sqlite_conn")


BACKENDS = [
    pytest.param("postgresql", marks=pytest.mark.postgresql),
    pytest.param("sqlite", marks=pytest.mark.sqlite),
]


@pytest.mark.parametrize("backend", BACKENDS)
def test_push_to_a_queue_whose_tables_were_never_created(
    backend: str, request: pytest.FixtureRequest, table_name: str
) -> None:
    conn = _connection(backend, request)
    dialect = get_dialect(backend)
    ex = executor_for(dialect, conn)
    queue = SplitQueue(QueueSpec(table_name, FIELDS), dialect)
    with pytest.raises(QueueTableMissing) as err:
        queue.push(ex, {"body": "hello"})
    message = str(err.value)
    assert repr(table_name) in message
    assert "migrat" in message  # says to run the migrations
    assert "create_statements" in message
    assert ex.in_transaction() is False  # the failed block left no transaction open
    with pytest.raises(QueueTableMissing, match=table_name):
        queue.pop_batch(ex, 5)
    with pytest.raises(QueueTableMissing, match=table_name):
        queue.stats(ex)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_half_created_queue_writes_nothing(
    backend: str, request: pytest.FixtureRequest, table_name: str
) -> None:
    # Only the data table exists (an interrupted migration): the push fails as a missing table
    # and the data row it started to write is rolled back with it.
    conn = _connection(backend, request)
    dialect = get_dialect(backend)
    ex = executor_for(dialect, conn)
    spec = QueueSpec(table_name, FIELDS)
    ex.execute(create_statements(spec, dialect)[0], {})
    try:
        with pytest.raises(QueueTableMissing, match=f"{table_name}.*migrat"):
            SplitQueue(spec, dialect).push(ex, {"body": "hello"})
        assert ex.execute(f'SELECT count(*) FROM "{table_name}"', {}) == [(0,)]
    finally:
        if backend == "postgresql":
            ex.execute(f'DROP TABLE "{table_name}"', {})


@pytest.mark.postgresql
def test_other_database_errors_are_not_called_missing_tables(pg_conn: psycopg.Connection) -> None:
    ex = PsycopgExecutor(pg_conn)
    with pytest.raises(psycopg.errors.UndefinedColumn):
        ex.execute("SELECT no_such_column FROM pg_class", {})


@pytest.mark.sqlite
def test_sqlite_other_errors_are_not_called_missing_tables(sqlite_conn: sqlite3.Connection) -> None:
    ex = SqliteExecutor(sqlite_conn)
    with pytest.raises(sqlite3.OperationalError, match="no such column"):
        ex.execute("SELECT no_such_column FROM sqlite_master", {})


# -- SQLite: transactions and savepoints --------------------------------------------------------


@pytest.fixture
def sqlite_ex(sqlite_conn: sqlite3.Connection) -> SqliteExecutor:
    sqlite_conn.execute("CREATE TABLE t (v text)")
    return SqliteExecutor(sqlite_conn)


def _values(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT v FROM t ORDER BY rowid")]


class Boom(Exception):
    pass


@pytest.mark.sqlite
def test_sqlite_atomic_commits_or_rolls_back(sqlite_ex: SqliteExecutor) -> None:
    conn = sqlite_ex.connection
    assert sqlite_ex.in_transaction() is False
    with sqlite_ex.atomic():
        assert sqlite_ex.in_transaction() is True
        sqlite_ex.execute("INSERT INTO t VALUES ('kept')", {})
    assert sqlite_ex.in_transaction() is False
    with pytest.raises(Boom), sqlite_ex.atomic():
        sqlite_ex.execute("INSERT INTO t VALUES ('gone')", {})
        raise Boom
    assert sqlite_ex.in_transaction() is False
    assert _values(conn) == ["kept"]


@pytest.mark.sqlite
def test_sqlite_atomic_nests_as_a_savepoint(sqlite_ex: SqliteExecutor) -> None:
    conn = sqlite_ex.connection
    with sqlite_ex.atomic():
        sqlite_ex.execute("INSERT INTO t VALUES ('outer')", {})
        with pytest.raises(Boom), sqlite_ex.atomic():
            sqlite_ex.execute("INSERT INTO t VALUES ('inner')", {})
            raise Boom
        assert sqlite_ex.in_transaction() is True  # the outer transaction is still open
        assert _values(conn) == ["outer"]
        sqlite_ex.execute("INSERT INTO t VALUES ('after')", {})
    assert _values(conn) == ["outer", "after"]


@pytest.mark.sqlite
def test_sqlite_savepoints_nest_three_deep(sqlite_ex: SqliteExecutor) -> None:
    conn = sqlite_ex.connection
    with sqlite_ex.atomic():
        sqlite_ex.execute("INSERT INTO t VALUES ('1')", {})
        with sqlite_ex.atomic():
            sqlite_ex.execute("INSERT INTO t VALUES ('2')", {})
            with pytest.raises(Boom), sqlite_ex.atomic():
                sqlite_ex.execute("INSERT INTO t VALUES ('3')", {})
                raise Boom
            sqlite_ex.execute("INSERT INTO t VALUES ('2b')", {})
    assert _values(conn) == ["1", "2", "2b"]


@pytest.mark.sqlite
def test_sqlite_atomic_inside_the_callers_own_transaction(sqlite_ex: SqliteExecutor) -> None:
    conn = sqlite_ex.connection
    conn.execute("BEGIN")
    conn.execute("INSERT INTO t VALUES ('caller')")
    with pytest.raises(Boom), sqlite_ex.atomic():
        sqlite_ex.execute("INSERT INTO t VALUES ('block')", {})
        raise Boom
    assert conn.in_transaction  # the caller's transaction is the caller's to end
    conn.execute("ROLLBACK")
    assert _values(conn) == []


@pytest.mark.sqlite
def test_sqlite_outer_rollback_undoes_a_released_savepoint(sqlite_ex: SqliteExecutor) -> None:
    conn = sqlite_ex.connection
    with pytest.raises(Boom), sqlite_ex.atomic():
        with sqlite_ex.atomic():
            sqlite_ex.execute("INSERT INTO t VALUES ('inner')", {})
        raise Boom
    assert _values(conn) == []


@pytest.mark.sqlite
def test_sqlite_atomic_takes_the_write_lock_at_once(
    sqlite_path: str, sqlite_ex: SqliteExecutor
) -> None:
    other = sqlite3.connect(sqlite_path, timeout=0, isolation_level=None)
    try:
        with sqlite_ex.atomic(), pytest.raises(sqlite3.OperationalError, match="locked"):
            other.execute("BEGIN IMMEDIATE")
    finally:
        other.close()


# -- SQLite: connection setup and version -------------------------------------------------------


@pytest.mark.sqlite
def test_connect_sets_wal_autocommit_and_a_busy_timeout(sqlite_path: str) -> None:
    conn = connect(sqlite_path, timeout=12.5)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 12500
        assert conn.isolation_level is None and not conn.in_transaction
    finally:
        conn.close()
    # WAL is a property of the database file: a plain connection sees it too.
    plain = sqlite3.connect(sqlite_path)
    try:
        assert plain.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        plain.close()


@pytest.mark.sqlite
def test_connections_opened_together_switch_a_database_to_wal(tmp_path: Any) -> None:
    """Switching to WAL needs an exclusive lock that SQLite refuses at once, without its busy
    timeout: a worker's threads that connected together failed with "database is locked"."""
    for round_ in range(20):
        path = str(tmp_path / f"fresh{round_}.sqlite3")
        sqlite3.connect(path).close()  # a new database, in rollback-journal mode
        start = threading.Barrier(4)
        with ThreadPoolExecutor(4) as pool:
            for future in [pool.submit(_open_and_write, path, start) for _ in range(4)]:
                future.result()  # raises the thread's error, if any
        check = sqlite3.connect(path)
        try:
            assert check.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert check.execute("SELECT count(*) FROM t").fetchone()[0] == 4
        finally:
            check.close()


def _open_and_write(path: str, start: threading.Barrier) -> None:
    start.wait()
    conn = connect(path)
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS t (x integer)")
        conn.execute("INSERT INTO t VALUES (1)")
    finally:
        conn.close()


@pytest.mark.parametrize("version", ["3.34.1", "3.34.0", "3.7.17", "2.8.17"])
def test_an_old_sqlite_is_unsupported(version: str) -> None:
    with pytest.raises(UnsupportedDatabase) as err:
        check_version(version)
    assert version in str(err.value)
    assert ".".join(map(str, MIN_VERSION)) in str(err.value) and "RETURNING" in str(err.value)


@pytest.mark.parametrize("version", ["3.35.0", "3.35.5", "3.40.1", "3.46.0", "4.0.0"])
def test_a_recent_sqlite_is_supported(version: str) -> None:
    check_version(version)


def test_this_pythons_sqlite_is_supported() -> None:
    check_version()
    check_version(sqlite3.sqlite_version)
