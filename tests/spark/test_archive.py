"""The archive job (dbqueue.spark.archive): exactly the old finished items move to Parquet,
partitioned by queue and day, and leave the database; re-runs add nothing; a run that crashed
after any step is finished by the next one, with every item archived once and none lost."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from dbqueue import QueueSpec
from dbqueue.spark.archive import STEPS, ArchiveResult, archive
from tests.spark.archive_support import (
    FIELDS,
    OLD_COUNT,
    OLD_DAYS,
    WEEK,
    Scenario,
    archive_rows,
    archived_ids,
    build_scenario,
    database_items,
    log_stages,
    staging_files,
)
from tests.spark.conftest import SPARK, create_queue, drop_queue

pytestmark = SPARK

#: Seconds to wait for another thread (a hang guard, not a threshold).
PATIENCE = 120.0


#: The record names of a run's last stage.
FINAL = ("-deleted.json", "-discarded.json")
#: The fixtures most tests take.
Conn = psycopg.Connection[Any]


class Crash(Exception):
    """What the crash seam raises: the process died right after a step."""


def crash_at(step: str, nth: int = 1) -> Callable[[str], None]:
    """An ``on_step`` hook that raises :class:`Crash` the ``nth`` time ``step`` completes."""
    seen = 0

    def hook(name: str) -> None:
        nonlocal seen
        if name == step:
            seen += 1
            if seen == nth:
                raise Crash(step)

    return hook


@pytest.fixture
def scenario(spark_conn: psycopg.Connection[Any], table_name: str) -> Iterator[Scenario]:
    spec = QueueSpec(table_name, FIELDS)
    create_queue(spark_conn, spec)
    yield build_scenario(spark_conn, spec)
    drop_queue(spark_conn, spec)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return tmp_path / "archive"


def run(spark: Any, dsn: str, scenario: Scenario, folder: Path, **kw: Any) -> ArchiveResult:
    kw.setdefault("progress", False)
    return archive(spark, dsn, scenario.table, WEEK, str(folder), **kw)


def assert_done(conn: psycopg.Connection[Any], scenario: Scenario, folder: Path) -> None:
    """The end state of every successful history: each old item archived exactly once, the
    database holds exactly the others, unchanged, and no run is left unfinished."""
    assert archived_ids(folder) == sorted(scenario.old)
    assert database_items(conn, scenario.spec) == scenario.kept
    assert staging_files(folder) == []
    stages = log_stages(folder, scenario.table)
    runs = {name.split(".")[0] for name in stages}
    for run_id in runs:
        ends = [n for n in stages if n.startswith(run_id) and n.endswith(FINAL)]
        assert len(ends) == 1, stages


def test_archive_moves_exactly_the_old_finished_items(
    spark: Any, spark_dsn: str, spark_conn: Conn, scenario: Scenario, folder: Path
) -> None:
    result = run(spark, spark_dsn, scenario, folder)
    assert (result.rows_expected, result.rows_written, result.rows_deleted) == (OLD_COUNT,) * 3
    assert result.outcome == "archived" and result.kept == 0 and result.recovered == ()
    assert result.partitions == tuple(f"queue={scenario.table}/day={d}" for d in OLD_DAYS)
    assert_done(spark_conn, scenario, folder)
    rows = {row["id"]: row for row in archive_rows(folder)}
    for item, finished in scenario.old.items():
        row = rows[item]
        assert row["finished_at"] == finished
        assert row["day"] == finished.date().isoformat()  # the UTC day, 23:59:59.999 included
        assert row["queue"] == scenario.table and row["archive_run"] == result.run
        assert row["state"] == ("failed" if finished.day == 3 else "done")
        assert row["body"] == f"b{row['n']}" and row["enqueued_at"] is not None
    assert set(next(iter(rows.values()))) == {
        "id", "state", "priority", "attempts", "enqueued_at", "finished_at", "last_error", "n",
        "body", "archive_run", "queue", "day",
    }  # fmt: skip
    records = [json.loads((folder / "_dbqueue_archive_log" / scenario.table / n).read_text())
               for n in log_stages(folder, scenario.table)]  # fmt: skip
    assert [(r["stage"], r["rows"]) for r in records] == [
        ("started", OLD_COUNT), ("staged", OLD_COUNT), ("written", OLD_COUNT),
        ("deleted", OLD_COUNT),
    ]  # fmt: skip
    assert sorted(records[1]["files"]) == sorted(result.files)


def test_a_second_run_finds_nothing_and_writes_nothing(
    spark: Any, spark_dsn: str, spark_conn: Conn, scenario: Scenario, folder: Path
) -> None:
    first = run(spark, spark_dsn, scenario, folder)
    files = sorted(p.relative_to(folder) for p in folder.rglob("*"))
    again = run(spark, spark_dsn, scenario, folder)
    assert again.outcome == "nothing" and again.run is None and again.rows_written == 0
    assert "nothing to archive" in again.summary()
    assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == files
    assert first.rows_deleted == OLD_COUNT
    assert_done(spark_conn, scenario, folder)


# -- crashes --------------------------------------------------------------------------------------

#: What the next run reports about the run that crashed after each step: a run that crashed
#: before its write was verified is verified now (Spark finished it) or thrown away.
RECOVERED = {"started": "discarded"} | dict.fromkeys(STEPS[1:-1], "resumed")


@pytest.mark.parametrize("step", [s for s in STEPS if s != "deleted"])
def test_a_rerun_finishes_a_run_that_crashed_after_any_step(
    spark: Any,
    spark_dsn: str,
    spark_conn: psycopg.Connection[Any],
    scenario: Scenario,
    folder: Path,
    step: str,
) -> None:
    # batch_size 7: the crash after the second of five delete batches leaves 14 deleted.
    hook = crash_at(step, nth=2 if step == "batch" else 1)
    with pytest.raises(Crash):
        run(spark, spark_dsn, scenario, folder, batch_size=7, on_step=hook)
    # Whatever a reader sees meanwhile is old items, each once; the database lost nothing.
    visible = archived_ids(folder)
    assert len(visible) == len(set(visible)) and set(visible) <= set(scenario.old)
    left = database_items(spark_conn, scenario.spec)
    assert set(scenario.old) - set(left) <= set(visible)
    assert {k: left[k] for k in scenario.kept} == scenario.kept

    result = run(spark, spark_dsn, scenario, folder, batch_size=7)
    (recovered,) = result.recovered
    assert recovered.outcome == RECOVERED[step]
    if recovered.outcome == "resumed":
        assert recovered.rows_written == OLD_COUNT
        assert recovered.rows_deleted == (OLD_COUNT - 14 if step == "batch" else OLD_COUNT)
        assert result.outcome == "nothing"
    else:
        assert result.rows_written == result.rows_deleted == OLD_COUNT
    assert_done(spark_conn, scenario, folder)


def test_a_crash_after_the_last_step_needs_nothing_more(
    spark: Any, spark_dsn: str, spark_conn: Conn, scenario: Scenario, folder: Path
) -> None:
    with pytest.raises(Crash):
        run(spark, spark_dsn, scenario, folder, on_step=crash_at("deleted"))
    again = run(spark, spark_dsn, scenario, folder)
    assert again.recovered == () and again.outcome == "nothing"
    assert_done(spark_conn, scenario, folder)


def test_a_write_spark_did_not_finish_is_thrown_away(
    spark: Any, spark_dsn: str, spark_conn: Conn, scenario: Scenario, folder: Path
) -> None:
    """A job that died while committing leaves some files and no _SUCCESS marker."""
    with pytest.raises(Crash):
        run(spark, spark_dsn, scenario, folder, on_step=crash_at("wrote"))
    (success,) = (folder / "_dbqueue_staging").rglob("_SUCCESS")
    success.unlink()
    staging_files(folder)[0].unlink()
    result = run(spark, spark_dsn, scenario, folder)
    assert [r.outcome for r in result.recovered] == ["discarded"]
    assert result.rows_written == result.rows_deleted == OLD_COUNT
    assert_done(spark_conn, scenario, folder)


# -- concurrent changes ---------------------------------------------------------------------------


def test_an_item_retried_between_write_and_delete_stays(
    spark: Any, spark_dsn: str, spark_conn: Conn, scenario: Scenario, folder: Path
) -> None:
    retried = min(scenario.old)
    meta = scenario.spec.meta_table

    def retry(step: str) -> None:
        if step == "written":  # what dbqueue retry does: back to ready, due now
            spark_conn.execute(
                f'UPDATE "{meta}" SET state = 0, attempts = 0, run_at = now() WHERE id = %s',
                [retried],
            )

    result = run(spark, spark_dsn, scenario, folder, on_step=retry)
    assert (result.rows_written, result.rows_deleted, result.kept) == (OLD_COUNT, OLD_COUNT - 1, 1)
    assert "1 kept" in result.summary()
    assert database_items(spark_conn, scenario.spec) == {**scenario.kept, retried: 0}
    assert archived_ids(folder) == sorted(scenario.old)  # its finished copy, once


def test_rows_that_appear_late_fail_the_verification_and_nothing_is_deleted(
    spark: Any, spark_dsn: str, spark_conn: Conn, scenario: Scenario, folder: Path
) -> None:
    """An item finished by a transaction that stayed open past the cut-off becomes archivable
    after the run counted: the database then holds more than the run wrote."""
    from dbqueue.spark.archive import ArchiveVerificationFailed

    late = next(k for k, state in scenario.kept.items() if state == 0)

    def finish_late(step: str) -> None:
        if step == "wrote":
            spark_conn.execute(
                f'UPDATE "{scenario.spec.meta_table}" SET state = 2, '
                f"run_at = '2025-03-01T09:00:00+00' WHERE id = %s",
                [late],
            )

    with pytest.raises(ArchiveVerificationFailed, match="nothing was deleted"):
        run(spark, spark_dsn, scenario, folder, on_step=finish_late)
    assert archived_ids(folder) == [] and staging_files(folder) == []
    assert len(database_items(spark_conn, scenario.spec)) == OLD_COUNT + len(scenario.kept)
    assert log_stages(folder, scenario.table)[-1].endswith("-discarded.json")

    again = run(spark, spark_dsn, scenario, folder)
    assert again.rows_written == again.rows_deleted == OLD_COUNT + 1
    assert archived_ids(folder) == sorted([*scenario.old, late])


def test_two_runs_of_one_queue_at_once_are_refused(
    spark: Any, spark_dsn: str, spark_conn: Conn, scenario: Scenario, folder: Path
) -> None:
    from dbqueue.spark.archive_db import ArchiveBusy

    inside, release = threading.Event(), threading.Event()
    results: list[ArchiveResult] = []

    def wait_inside(step: str) -> None:
        if step == "started":
            inside.set()
            assert release.wait(PATIENCE)

    first = threading.Thread(
        target=lambda: results.append(run(spark, spark_dsn, scenario, folder, on_step=wait_inside))
    )
    first.start()
    try:
        assert inside.wait(PATIENCE)
        with pytest.raises(ArchiveBusy, match="another archive run of queue"):
            run(spark, spark_dsn, scenario, folder)
    finally:
        release.set()
        first.join(PATIENCE)
    assert [r.rows_deleted for r in results] == [OLD_COUNT]
    assert len({name.split(".")[0] for name in log_stages(folder, scenario.table)}) == 1
    assert_done(spark_conn, scenario, folder)
