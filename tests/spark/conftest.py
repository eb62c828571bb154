"""Spark against the real PostgreSQL: one SparkSession per test process.

Every local-mode Spark test module is marked ``spark`` and put in the xdist group ``spark``,
so one test process runs them all and one JVM starts per run (a JVM and its Python workers
take ~10 s to start; two of them would also fight over the machine's two cores). The cluster
tests (``test_cluster_*.py``, :data:`SPARK_CLUSTER`) run on a standalone cluster of their own
(bench/spark_standalone.py), in the xdist group ``spark-cluster``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bench.spark_standalone import StandaloneCluster, standalone_cluster
from dbqueue import QueueOptions, QueueSpec, get_dialect
from dbqueue.schema import (
    create_ring_statements,
    create_statements,
    drop_ring_statements,
    drop_statements,
)
from tests.conftest import scratch_database
from tests.processes import ROOT
from tests.spark.sessions import OneSession, cluster_session, local_session

#: Marks for every Spark test module: ``pytestmark = SPARK``.
SPARK = [pytest.mark.spark, pytest.mark.postgresql, pytest.mark.xdist_group("spark")]
#: Marks for every cluster test module (``spark`` too, so ``-m "not spark"`` leaves them out).
SPARK_CLUSTER = [
    pytest.mark.spark,
    pytest.mark.spark_cluster,
    pytest.mark.postgresql,
    pytest.mark.xdist_group("spark-cluster"),
]

DIALECT = get_dialect("postgresql")


@pytest.fixture(scope="session")
def one_session() -> Iterator[OneSession]:
    """This process's one SparkSession, local or on the cluster (tests/spark/sessions.py)."""
    sessions = OneSession()
    yield sessions
    sessions.stop()


@pytest.fixture
def spark(one_session: OneSession, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A local SparkSession (2 cores) with the ``dbqueue`` data source registered."""
    return one_session.get(
        "local", lambda: local_session(tmp_path_factory.mktemp("spark-warehouse"))
    )


@pytest.fixture(scope="session")
def standalone(
    one_session: OneSession, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StandaloneCluster]:
    """A standalone cluster: a master and two workers (1 core, 1 GB each), each a JVM of its
    own, started at the first cluster test and stopped at the end of the run."""
    folder = tmp_path_factory.mktemp("spark-cluster")
    # The executors inherit the workers' environment: this checkout first on their path.
    with standalone_cluster(folder, environ={"PYTHONPATH": str(ROOT)}) as cluster:
        yield cluster
        if one_session.kind == "cluster":  # the driver goes before its executors
            one_session.stop()


@pytest.fixture
def spark_cluster(
    one_session: OneSession,
    standalone: StandaloneCluster,
    tmp_path_factory: pytest.TempPathFactory,
) -> Any:
    """A SparkSession on :func:`standalone` (two executors, in other processes than this
    one) with the ``dbqueue`` data source registered."""
    return one_session.get(
        "cluster",
        lambda: cluster_session(standalone.url, tmp_path_factory.mktemp("spark-warehouse")),
    )


@pytest.fixture(scope="session")
def spark_dsn() -> Iterator[str]:
    """A database of the Spark tests' own (their tables are large and short-lived)."""
    with scratch_database("dbqueue_spark") as dsn:
        yield dsn


@pytest.fixture
def spark_conn(spark_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to the Spark tests' database."""
    with psycopg.connect(spark_dsn, autocommit=True) as conn:
        yield conn


def create_queue(conn: psycopg.Connection[Any], spec: QueueSpec) -> None:
    """Create the tables of ``spec`` (a ring when it has a capacity) with the core's DDL."""
    ring = spec.options.capacity is not None
    for statement in (create_ring_statements if ring else create_statements)(spec, DIALECT):
        conn.execute(statement)


def drop_queue(conn: psycopg.Connection[Any], spec: QueueSpec) -> None:
    """Drop what :func:`create_queue` created, and the Spark stage table if any."""
    q = DIALECT.quote
    if spec.options.capacity is not None:
        for statement in drop_ring_statements(spec, DIALECT):
            conn.execute(statement)
    else:
        for statement in drop_statements(spec, DIALECT):
            conn.execute(statement)
    conn.execute(f"DROP TABLE IF EXISTS {q(spec.stage_table)}")


@pytest.fixture
def make_queue(
    spark_conn: psycopg.Connection[Any],
) -> Iterator[Callable[[QueueSpec], QueueSpec]]:
    """Create a queue's tables (:func:`create_queue`); the test's queues are dropped after it."""
    made: list[QueueSpec] = []

    def make(spec: QueueSpec) -> QueueSpec:
        create_queue(spark_conn, spec)
        made.append(spec)
        return spec

    yield make
    for spec in made:
        drop_queue(spark_conn, spec)


@pytest.fixture
def checkpoint(tmp_path: Path) -> str:
    """A fresh checkpoint folder for a streaming query."""
    return str(tmp_path / "checkpoint")


# The streaming tests' queues (a module that needs others declares its own of the same name).
from tests.spark.streams import ring, split  # noqa: E402

__all__ = ["SPARK", "SPARK_CLUSTER", "QueueOptions", "create_queue", "drop_queue", "ring", "split"]
