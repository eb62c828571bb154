"""``dbqueue archive``: the archive job from the shell, run as a deployment runs it (a
subprocess starting its own Spark), and the mistakes it refuses before Spark starts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from dbqueue import QueueSpec
from dbqueue_sa.cli import main
from tests.pg import database_url
from tests.spark.archive_support import (
    FIELDS,
    OLD_COUNT,
    OLD_DAYS,
    Scenario,
    archived_ids,
    build_scenario,
    database_items,
)
from tests.spark.conftest import create_queue, drop_queue
from tests.sqlalchemy.cli_support import dbqueue

#: A Spark job started from the shell: a JVM and a local Spark, minutes on a busy machine.
SPARK_PATIENCE = 300.0

pytestmark = [pytest.mark.sqlalchemy, pytest.mark.postgresql]


@pytest.fixture
def sa_url(pg_dsn: str) -> str:
    """The test database as a SQLAlchemy URL, driver and all (what DBQUEUE_URL holds)."""
    url = database_url(pg_dsn, str(conninfo_to_dict(pg_dsn)["dbname"]))
    return url.replace("postgresql://", "postgresql+psycopg://", 1)


@pytest.fixture
def scenario(pg_conn: psycopg.Connection[Any], table_name: str) -> Iterator[Scenario]:
    spec = QueueSpec(table_name, FIELDS)
    create_queue(pg_conn, spec)
    yield build_scenario(pg_conn, spec)
    drop_queue(pg_conn, spec)


@pytest.fixture
def empty_queue(pg_conn: psycopg.Connection[Any], table_name: str) -> Iterator[str]:
    spec = QueueSpec(f"{table_name}_e", FIELDS)
    create_queue(pg_conn, spec)
    yield spec.table
    drop_queue(pg_conn, spec)


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
def test_archive_two_queues_from_the_shell(
    sa_url: str,
    pg_conn: psycopg.Connection[Any],
    scenario: Scenario,
    empty_queue: str,
    tmp_path: Path,
) -> None:
    folder = tmp_path / "archive"
    args = ["--queue", scenario.table, "--queue", empty_queue, "--older-than", "1w"]
    done = dbqueue("archive", "--url", sa_url, *args, "--to", str(folder),
                   "--batch-size", "10", "--master", "local[1]",
                   timeout=SPARK_PATIENCE)  # fmt: skip
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    assert first.startswith(f"{scenario.table}: archived ")
    assert f": {OLD_COUNT} item(s) finished before " in first
    assert f"in {len(OLD_DAYS)} file(s), {len(OLD_DAYS)} day(s); deleted {OLD_COUNT}; " in first
    assert second.startswith(f"{empty_queue}: nothing to archive")
    progress = [line for line in done.stderr.splitlines() if line.startswith("deleting ")]
    assert progress[0].startswith(f"deleting 10 / {OLD_COUNT}, ")
    assert progress[-1].startswith(f"deleting {OLD_COUNT} / {OLD_COUNT}, ")
    assert archived_ids(folder) == sorted(scenario.old)
    assert database_items(pg_conn, scenario.spec) == scenario.kept


def run_in_process(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["archive", *args])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("older_than", "message"),
    [
        ("7x", "'7x' is not a duration: write a whole number followed by s, m, h, d or w"),
        ("7", "'7' is not a duration"),
        ("-7d", "'-7d' is not a duration"),
        ("0d", "the duration must be more than 0, got '0d'"),
    ],
)
def test_a_bad_duration_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], sa_url: str, tmp_path: Path, older_than: str, message: str
) -> None:
    # --older-than=-7d: a value after a space that starts with "-" is an option to argparse.
    args = ["--url", sa_url, "--queue", "q", f"--older-than={older_than}", "--to", str(tmp_path)]
    with pytest.raises(SystemExit) as exit_:
        main(["archive", *args])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_what_the_command_refuses_before_spark_starts(
    capsys: pytest.CaptureFixture[str],
    sa_url: str,
    pg_conn: psycopg.Connection[Any],
    scenario: Scenario,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DBQUEUE_URL", raising=False)
    folder = str(tmp_path / "archive")
    rest = ["--older-than", "7d", "--to", folder]
    cases = [
        (["--url", sa_url, "--queue", "no_such_q"], 2, "no queue table 'no_such_q'"),
        (["--url", "mysql://u@h/db", "--queue", "q"], 2, "got a 'mysql' URL"),
        (["--queue", scenario.table], 2, "no database: pass --url URL or set DBQUEUE_URL"),
        (
            ["--url", "postgresql://postgres@127.0.0.1:1/none", "--queue", scenario.table],
            1,
            "OperationalError: ",
        ),
    ]
    for args, code, message in cases:
        status, err = run_in_process(capsys, *args, *rest)
        assert status == code, err
        assert err.startswith("dbqueue archive: error: ") and message in err, err
    assert not Path(folder).exists()
    assert len(database_items(pg_conn, scenario.spec)) == OLD_COUNT + len(scenario.kept)
