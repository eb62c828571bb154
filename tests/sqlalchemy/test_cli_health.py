"""``dbqueue health`` and the worker's ``--health-file`` and ``--summary-every``: exit 0 when
the backlogs are young and the worker's health file fresh, 1 with a line per problem, 2 for
bad usage."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from dbqueue_sa.cli import main
from tests.processes import PATIENCE, wait_for
from tests.sqlalchemy.cli_support import dbqueue, push_jobs, start
from tests.sqlalchemy.handlers_app import ChoreBase

pytestmark = pytest.mark.sqlalchemy

APP = "tests.sqlalchemy.handlers_app"


@pytest.fixture
def all_tables(engine: sa.Engine) -> Iterator[sa.Engine]:
    """The handlers app's queue tables, empty: an earlier test of this process's database
    may have left them with old items, which would make the backlog unhealthy."""
    ChoreBase.metadata.drop_all(engine)
    ChoreBase.metadata.create_all(engine)
    yield engine
    ChoreBase.metadata.drop_all(engine)


def health(*args: str) -> tuple[int, str]:
    """``dbqueue health ARGS`` in a process of its own: it reports every queue class its
    process declared, and the test process declares others (other tests' models)."""
    done = dbqueue("health", *args)
    return done.returncode, done.stdout


def test_a_running_worker_touches_its_health_file_and_logs_a_summary(
    all_tables: sa.Engine, url: str, tmp_path: Path
) -> None:
    alive, log = tmp_path / "alive", tmp_path / "worker.log"
    proc = start(
        "worker", "--url", url, APP, "--health-file", str(alive), "--summary-every", "0.1",
        log=log,
    )  # fmt: skip
    try:
        wait_for(
            lambda: alive.exists() and "summary of the last" in log.read_text(),
            "a summary and the file",
            log,
        )
        # The app's queues only: other tests' queue tables in this database may hold old items.
        assert health("--url", url, APP, "--health-file", str(alive)) == (
            0,
            "healthy: sa_chore, sa_job, sa_tick\n",
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(PATIENCE) == 0, log.read_text()
    os.utime(alive, (0, 0))  # a worker gone for good: its file is not touched any more
    code, out = health("--url", url, APP, "--health-file", str(alive))
    assert code == 1
    assert out.startswith(f"unhealthy: worker: the worker's health file {alive} was last touched")


def test_a_missing_health_file_is_unhealthy(engine: sa.Engine, url: str, tmp_path: Path) -> None:
    code, out = health("--url", url, "--health-file", str(tmp_path / "nope"))
    assert code == 1
    assert f"the worker's health file {tmp_path / 'nope'} cannot be read" in out


def test_an_old_ready_item_is_unhealthy(all_tables: sa.Engine, url: str) -> None:
    push_jobs(all_tables, 1)
    time.sleep(0.05)  # the item is now older than the bound below
    code, out = health("--url", url, "tests.sqlalchemy.models", "--max-age", "0.01")
    assert code == 1
    assert out.startswith("unhealthy: sa_job: the oldest ready item has waited "), out
    assert health("--url", url, "tests.sqlalchemy.models")[0] == 0  # within 5 min


def test_missing_tables_are_unhealthy(engine: sa.Engine, url: str) -> None:
    code, out = health("--url", url, APP, "--json")  # Chore's tables were not created
    assert code == 1
    document = json.loads(out)
    assert document["problems"] == ["sa_chore: its tables do not exist in this database"]


@pytest.mark.parametrize("args", [["--max-age", "-1"], ["--max-heartbeat-age", "soon"]])
def test_bad_usage_exits_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["health", "--url", "sqlite:///x.db", *args])
    assert exc.value.code == 2
