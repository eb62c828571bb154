"""The SparkSessions the tests use: local mode, or a standalone cluster's
(bench/spark_standalone.py).

One process can hold only one SparkContext, and xdist may run the local tests (group
``spark``) and the cluster tests (group ``spark-cluster``) one after the other in the same
process; so the process keeps one session at a time (:class:`OneSession`): asking for the
other kind stops the current one first. Each group runs as one block, so that happens at most
once or twice per process.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.spark_standalone import session_config, wait_for_executors
from tests.processes import ROOT


def _common(builder: Any, warehouse: Path) -> Any:
    return (
        builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.driver.memory", "1g")
    )


def _python_env() -> None:
    # Spark's Python workers must run this interpreter, which has dbqueue installed.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


def local_session(warehouse: Path) -> Any:
    """A local SparkSession (2 cores) with the ``dbqueue`` data source registered."""
    _python_env()
    from pyspark.sql import SparkSession

    from dbqueue.spark import register

    builder = SparkSession.builder.master("local[2]").appName("dbqueue-tests")
    session = _common(builder, warehouse).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session


def cluster_session(master: str, warehouse: Path, executors: int = 2) -> Any:
    """A SparkSession on the standalone cluster at ``master`` (bench/spark_standalone.py: one
    executor of 1 core and 1 GB per worker, its Python workers running this interpreter with
    this checkout first on their path, as the venv's dbqueue may be another checkout's
    editable install); returned once ``executors`` executors have registered."""
    _python_env()
    from pyspark.sql import SparkSession

    from dbqueue.spark import register

    builder = SparkSession.builder.appName("dbqueue-cluster-tests")
    for key, value in session_config(master, sys.executable, str(ROOT), executors).items():
        builder = builder.config(key, value)
    session = _common(builder, warehouse).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    wait_for_executors(session, executors)
    return session


class OneSession:
    """This process's one SparkSession, of one kind at a time."""

    def __init__(self) -> None:
        self.kind: str | None = None
        self.session: Any = None

    def get(self, kind: str, build: Callable[[], Any]) -> Any:
        """The session of ``kind``, built by ``build`` after stopping one of another kind."""
        if self.kind != kind:
            self.stop()
            self.session, self.kind = build(), kind
        return self.session

    def stop(self) -> None:
        if self.session is not None:
            self.session.stop()
        self.session, self.kind = None, None
