"""Spark in local mode against the real PostgreSQL: one SparkSession per test process.

Every Spark test module is marked ``spark`` and put in the xdist group ``spark``, so one test
process runs them all and one JVM starts per run (a JVM and its Python workers take ~10 s to
start; two of them would also fight over the machine's two cores).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from dbqueue import QueueOptions, QueueSpec, get_dialect
from dbqueue.schema import create_ring_statements, create_statements, drop_ring_statements
from tests.conftest import scratch_database

#: Marks for every Spark test module: ``pytestmark = SPARK``.
SPARK = [pytest.mark.spark, pytest.mark.postgresql, pytest.mark.xdist_group("spark")]

DIALECT = get_dialect("postgresql")


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A local SparkSession (2 cores) with the ``dbqueue`` data source registered."""
    # Spark's Python workers must run this interpreter, which has dbqueue installed.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from dbqueue.spark import register

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("dbqueue-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


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
        conn.execute(f"DROP TABLE IF EXISTS {q(spec.table)}, {q(spec.meta_table)}")
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


__all__ = ["SPARK", "QueueOptions", "create_queue", "drop_queue"]
