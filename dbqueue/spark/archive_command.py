"""What ``dbqueue archive`` and ``manage.py archivequeue`` share: check the queues, start Spark,
archive each queue in turn and print a line per run. Each front end only finds the database
and the queues' tables its own way, and maps errors to its own exit."""

from __future__ import annotations

import datetime as dt
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from dbqueue.spark import register
from dbqueue.spark.archive import ArchiveResult, archive
from dbqueue.spark.catalog import load_queue
from dbqueue.spark.connection import connect, conninfo


class Output(Protocol):
    """Where the summary lines go: a text stream, or Django's command output."""

    def write(self, text: str, /) -> Any: ...

    def flush(self) -> Any: ...


@contextmanager
def spark_session(
    master: str, app: str = "dbqueue-archive", config: Mapping[str, str] | None = None
) -> Iterator[Any]:
    """The active SparkSession if there is one (a notebook, a test, an embedding job), else a
    new one on ``master`` with the settings ``config``, stopped at the end; with the
    ``dbqueue`` source registered. (An active session keeps its own settings: a JVM's, such as
    ``spark.driver.memory``, cannot change once it runs.)

    PySpark starts its Python workers with ``python3`` from PATH unless ``PYSPARK_PYTHON`` says
    otherwise, and a worker of another minor version fails (PYTHON_VERSION_MISMATCH): when it
    is unset, the workers run this interpreter."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        register(active)
        yield active
        return
    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        # Spark's own stage bars would interleave with the archive's progress line.
        .config("spark.ui.showConsoleProgress", "false")
    )
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    register(session)
    try:
        yield session
    finally:
        session.stop()


def run_archive(
    url: str,
    tables: Sequence[str],
    *,
    older_than: dt.timedelta,
    to: str,
    batch_size: int,
    master: str,
    progress: bool,
    out: Output,
) -> list[ArchiveResult]:
    """Archive each queue of ``tables`` in turn into ``to``; a line per run on ``out``.

    Every queue is looked up before Spark starts, so a misspelt name or a wrong database fails
    in a second rather than after the JVM's start. The first error stops the command: the
    queues before it are archived, the others untouched."""
    info = conninfo(url)
    with connect(info) as conn:
        for table in tables:
            load_queue(conn, table)
    results = []
    with spark_session(master) as spark:
        for table in dict.fromkeys(tables):
            result = archive(
                spark, info, table, older_than, to, batch_size=batch_size, progress=progress
            )
            for line in summary_lines(result):
                out.write(line + "\n")
            out.flush()
            results.append(result)
    return results


def summary_lines(result: ArchiveResult) -> list[str]:
    """The lines of a run: the unfinished runs it finished first, then its own."""
    return [r.summary() for r in result.recovered] + [result.summary()]
