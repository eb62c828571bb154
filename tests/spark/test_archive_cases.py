"""The archive job beyond the split queue's main story: a ring queue's failed table, the
progress display, and bad input refused before anything is written."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from dbqueue import Field, FieldKind, QueueOptions, QueueSpec, RingQueue, SplitQueue
from dbqueue.drivers import executor_for
from dbqueue.errors import InvalidArgument, InvalidSpec, QueueTableMissing, UnsupportedDatabase
from dbqueue.spark.archive import archive
from tests.spark.archive_support import (
    DIALECT,
    FIELDS,
    OLD_COUNT,
    WEEK,
    Scenario,
    archive_rows,
    archived_ids,
    build_scenario,
    database_items,
)
from tests.spark.conftest import SPARK, create_queue, drop_queue

pytestmark = SPARK


@pytest.fixture
def scenario(spark_conn: psycopg.Connection[Any], table_name: str) -> Iterator[Scenario]:
    spec = QueueSpec(table_name, FIELDS)
    create_queue(spark_conn, spec)
    yield build_scenario(spark_conn, spec)
    drop_queue(spark_conn, spec)


# -- ring queues ----------------------------------------------------------------------------------


@pytest.fixture
def ring(spark_conn: psycopg.Connection[Any], table_name: str) -> Iterator[QueueSpec]:
    spec = QueueSpec(table_name, FIELDS, QueueOptions(capacity=16, max_attempts=1))
    create_queue(spark_conn, spec)
    yield spec
    drop_queue(spark_conn, spec)


def fail_into_ring_table(conn: psycopg.Connection[Any], spec: QueueSpec, count: int) -> list[int]:
    """Push, pop and fail ``count`` messages (one attempt each): rows of the failed table."""
    ex, queue = executor_for(DIALECT, conn), RingQueue(spec, DIALECT)
    queue.push_many(ex, [{"n": i, "body": f"r{i}"} for i in range(count)])
    items = queue.pop_batch(ex, count)
    queue.fail(ex, items, "broken")
    return sorted(m.id for m in items)


def test_a_ring_queue_archives_its_old_failed_messages(
    spark: Any, spark_dsn: str, spark_conn: psycopg.Connection[Any], ring: QueueSpec, tmp_path: Path
) -> None:
    failed = fail_into_ring_table(spark_conn, ring, 10)
    old, recent = failed[:6], failed[6:]
    spark_conn.execute(
        f"UPDATE \"{ring.failed_table}\" SET failed_at = '2025-05-04T10:00:00+00' "
        f"WHERE id = ANY(%s)",
        [old],
    )
    RingQueue(ring, DIALECT).push(executor_for(DIALECT, spark_conn), {"n": 99, "body": "live"})
    folder = tmp_path / "archive"

    result = archive(spark, spark_dsn, ring.table, WEEK, str(folder), progress=False)
    assert result.rows_written == result.rows_deleted == 6
    assert result.partitions == (f"queue={ring.table}/day=2025-05-04",)
    rows = archive_rows(folder)
    assert sorted(r["id"] for r in rows) == old
    assert {(r["state"], r["last_error"], r["attempts"]) for r in rows} == {("failed", "broken", 1)}
    assert {r["body"] for r in rows} == {f"r{i}" for i in range(6)}
    left = {r[0] for r in spark_conn.execute(f'SELECT id FROM "{ring.failed_table}"')}
    assert left == set(recent)
    full = spark_conn.execute(f'SELECT count(*) FROM "{ring.table}" WHERE state = 1').fetchone()
    assert full == (1,)  # the live message's slot is untouched
    assert archive(spark, spark_dsn, ring.table, WEEK, str(folder), progress=False).outcome == (
        "nothing"
    )


# -- progress -------------------------------------------------------------------------------------


def test_progress_goes_to_a_callable_per_batch(
    spark: Any, spark_dsn: str, scenario: Scenario, tmp_path: Path
) -> None:
    seen: list[tuple[int, int]] = []
    archive(spark, spark_dsn, scenario.table, WEEK, str(tmp_path / "a"), batch_size=8,
            progress=lambda done, total: seen.append((done, total)))  # fmt: skip
    assert seen == [(8, OLD_COUNT), (16, OLD_COUNT), (24, OLD_COUNT), (OLD_COUNT, OLD_COUNT)]


def test_the_progress_line_counts_rows_and_their_rate(
    spark: Any,
    spark_dsn: str,
    scenario: Scenario,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    archive(spark, spark_dsn, scenario.table, WEEK, str(tmp_path / "a"), batch_size=3)
    lines = capsys.readouterr().err.splitlines()  # not a terminal: a line per tenth
    assert len(lines) == 10
    assert re.fullmatch(rf"deleting 3 / {OLD_COUNT}, [\d,]+/s", lines[0])
    assert lines[-1].startswith(f"deleting {OLD_COUNT} / {OLD_COUNT}, ")


# -- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"older_than": dt.timedelta(0)}, InvalidArgument, "older_than must be a positive"),
        ({"older_than": -WEEK}, InvalidArgument, "older_than must be a positive"),
        ({"older_than": 7}, InvalidArgument, "older_than must be a positive"),
        ({"batch_size": 0}, InvalidArgument, "batch_size must be a positive integer"),
        ({"queue": "no_such_queue"}, QueueTableMissing, "no queue table 'no_such_queue'"),
        ({"queue": "Bad-Name"}, InvalidSpec, "is not a valid identifier"),
        ({"url": "mysql://u@localhost/db"}, UnsupportedDatabase, "needs PostgreSQL"),
        ({"url": "sqlite:///queue.db"}, UnsupportedDatabase, "needs PostgreSQL"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(
    spark: Any,
    spark_dsn: str,
    spark_conn: psycopg.Connection[Any],
    scenario: Scenario,
    tmp_path: Path,
    change: dict[str, Any],
    error: type[Exception],
    message: str,
) -> None:
    args: dict[str, Any] = {"url": spark_dsn, "queue": scenario.table, "older_than": WEEK}
    args |= change
    folder = tmp_path / "archive"
    batch = args.pop("batch_size", 100)
    with pytest.raises(error, match=message):
        archive(spark, args["url"], args["queue"], args["older_than"], str(folder),
                batch_size=batch, progress=False)  # fmt: skip
    assert not folder.exists()
    assert len(database_items(spark_conn, scenario.spec)) == OLD_COUNT + len(scenario.kept)


def test_a_payload_field_named_like_an_archive_column_is_refused(
    spark: Any, spark_dsn: str, spark_conn: psycopg.Connection[Any], table_name: str, tmp_path: Path
) -> None:
    spec = QueueSpec(table_name, (Field("day", FieldKind.DATE),))
    create_queue(spark_conn, spec)
    try:
        with pytest.raises(InvalidSpec, match=r"payload field\(s\) day, a name the archive"):
            archive(spark, spark_dsn, table_name, WEEK, str(tmp_path / "a"), progress=False)
    finally:
        drop_queue(spark_conn, spec)
    assert not (tmp_path / "a").exists()


def test_spark_reads_the_archive_without_the_log_or_staging(
    spark: Any, spark_dsn: str, scenario: Scenario, tmp_path: Path
) -> None:
    folder = tmp_path / "archive"
    archive(spark, spark_dsn, scenario.table, WEEK, str(folder), progress=False)
    frame = spark.read.parquet(str(folder))
    assert frame.count() == OLD_COUNT
    assert {"queue", "day", "archive_run"} <= set(frame.columns)
    assert sorted(r.id for r in frame.select("id").collect()) == archived_ids(folder)


# -- keep_done ------------------------------------------------------------------------------------


def test_a_keep_done_queue_feeds_the_archive(
    spark: Any, spark_dsn: str, spark_conn: psycopg.Connection[Any], table_name: str, tmp_path: Path
) -> None:
    """Done items as the queue's own ack leaves them (no UPDATE by the test); a microsecond's
    cut-off archives everything finished before the run started."""
    spec = QueueSpec(table_name, FIELDS, QueueOptions(keep_done=True, max_attempts=1))
    create_queue(spark_conn, spec)
    try:
        ex, queue = executor_for(DIALECT, spark_conn), SplitQueue(spec, DIALECT)
        queue.push_many(ex, [{"n": i, "body": f"k{i}"} for i in range(12)])
        acked = queue.ack(ex, queue.pop_batch(ex, 5))
        failed = sorted(queue.fail(ex, queue.pop_batch(ex, 3), "boom"))
        result = archive(spark, spark_dsn, table_name, dt.timedelta(microseconds=1),
                         str(tmp_path / "a"), progress=False)  # fmt: skip
        assert result.rows_written == result.rows_deleted == 8
        rows = {r["id"]: r for r in archive_rows(tmp_path / "a")}
        assert sorted(rows) == sorted(acked + failed)
        assert {rows[i]["state"] for i in acked} == {"done"}
        assert {(rows[i]["state"], rows[i]["last_error"]) for i in failed} == {("failed", "boom")}
        assert set(database_items(spark_conn, spec).values()) == {0}  # the 4 never popped
    finally:
        drop_queue(spark_conn, spec)
