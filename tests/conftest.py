"""Fixtures shared by every test package: databases, never mocked."""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from dbqueue.upkeep import keeper
from tests.pg import server_dsn, worker_id

# The keeper of API consumers (dbqueue.upkeep.keeper) would advance heads and compact tables in
# the background of every test that pops: tests/core/upkeep/test_keeper.py turns it on for its
# own (subprocesses, such as the workers the acceptance tests start, keep theirs).
keeper.disable()

#: What ``--solo`` selects: the tests marked ``solo`` measure storage on a machine doing
#: nothing else, so scripts/run_tests.py runs them alone after the parallel run.
SOLO_CHOICES = ("all", "exclude", "only")
#: What ``--soak`` selects: the tests marked ``soak`` put minutes of load on the machine (the
#: whole benchmark, a chaos run, the load test, the Spark demo); ``make test`` leaves them out
#: and ``make test-soak`` runs them.
SOAK_CHOICES = ("exclude", "all", "only")
#: What ``--spark-cluster`` selects among the Spark cluster tests (tests/spark/test_cluster.py):
#: the short set ``make test`` runs, or every one of them (``make test-spark-cluster``).
CLUSTER_CHOICES = ("short", "full")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--solo",
        choices=SOLO_CHOICES,
        default="all",
        help="run the tests marked solo too (all), leave them out (exclude) or run only them",
    )
    parser.addoption(
        "--soak",
        choices=SOAK_CHOICES,
        default="exclude",
        help="the soak tests (minutes of load each): leave them out (exclude, the default), "
        "run them too (all) or run only them (make test-soak)",
    )
    parser.addoption(
        "--spark-cluster",
        choices=CLUSTER_CHOICES,
        default="short",
        help="the Spark cluster tests to run: the short set, or the long ones (cluster_full) too",
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Last, after -m, -k and --deselect: what is counted below is what the run selected.
    if config.getoption("--spark-cluster") == "short":
        _deselect(config, items, lambda item: item.get_closest_marker("cluster_full") is None)
    soak = config.getoption("--soak")
    if soak != "all":
        wanted = soak == "only"
        _deselect(
            config, items, lambda item: (item.get_closest_marker("soak") is not None) == wanted
        )
    _longest_groups_first(items)
    choice = config.getoption("--solo")
    if choice == "all":
        return
    keep, drop = [], []
    for item in items:
        is_solo = item.get_closest_marker("solo") is not None
        (keep if is_solo == (choice == "only") else drop).append(item)
    if choice == "exclude":
        _report_solo_count(len(drop))
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


#: The xdist groups that take longest, in the order they start: each runs on one test process
#: (a JVM each: tests/spark/conftest.py), so one started last would run alone at the end of
#: the run while the other process idles (minutes of the run, on two cores).
LONGEST_GROUPS = ("spark", "spark-cluster")


def _longest_groups_first(items: list[pytest.Item]) -> None:
    """Put the tests of :data:`LONGEST_GROUPS` first (each group's tests in their order), so
    ``--dist loadgroup`` hands those groups out first and the rest fills around them."""

    def rank(item: pytest.Item) -> int:
        marker = item.get_closest_marker("xdist_group")
        name = marker.args[0] if marker is not None and marker.args else None
        return LONGEST_GROUPS.index(name) if name in LONGEST_GROUPS else len(LONGEST_GROUPS)

    items.sort(key=rank)  # stable: the order within each rank stays


def _deselect(
    config: pytest.Config, items: list[pytest.Item], keep: Callable[[pytest.Item], bool]
) -> None:
    """Leave out the items ``keep`` refuses, as -m does (counted as deselected)."""
    drop = [item for item in items if not keep(item)]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [item for item in items if keep(item)]


def _report_solo_count(count: int) -> None:
    """Tell scripts/run_tests.py how many solo tests this selection holds, so it skips a solo
    pass that would run nothing (xdist workers all write the same count)."""
    path = os.environ.get("DBQUEUE_SOLO_COUNT_FILE")
    if path:
        tmp = f"{path}.{os.getpid()}"
        Path(tmp).write_text(str(count))
        os.replace(tmp, path)


@contextmanager
def scratch_database(prefix: str) -> Iterator[str]:
    """A new database of this xdist worker's own on the shared test server; its DSN."""
    base = server_dsn()
    name = f"{prefix}_{worker_id()}_{os.getpid()}"
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield psycopg.conninfo.make_conninfo(base, dbname=name)
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """A database of this xdist worker's own on the shared test server, for core tests."""
    with scratch_database("dbqueue_core") as dsn:
        yield dsn


@pytest.fixture(scope="session")
def empty_pg_dsn() -> Iterator[str]:
    """A database of this worker's own that only tests which leave it empty use: what
    compares a whole database with a schema (Alembic's autogenerate) sees nothing else."""
    with scratch_database("dbqueue_empty") as dsn:
        yield dsn


@pytest.fixture
def pg_conn(pg_dsn: str) -> Iterator[psycopg.Connection]:
    """An autocommit connection to the worker's core test database."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def sqlite_path(tmp_path: Path) -> str:
    """A SQLite database in a temporary file (not :memory:, so other connections see rows)."""
    return str(tmp_path / "queue.sqlite3")


@pytest.fixture
def sqlite_conn(sqlite_path: str) -> Iterator[sqlite3.Connection]:
    from dbqueue.drivers.sqlite import connect

    conn = connect(sqlite_path)
    yield conn
    conn.close()


@pytest.fixture
def table_name() -> str:
    """A fresh queue table name, so tests sharing a database never see each other's rows."""
    return f"q_{uuid.uuid4().hex[:12]}"
