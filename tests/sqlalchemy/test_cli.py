"""The ``dbqueue`` command line, run as a subprocess the way a deployment runs it (``python -m
dbqueue_sa.cli``), against real databases: the worker in burst mode and until SIGTERM, stats
with and without modules, retry and purge with their progress, and the errors each refuses
with. Output formatting is also tested in process."""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from dbqueue.message import State
from dbqueue_sa.cli import Progress, main
from tests.processes import PATIENCE, wait_for
from tests.sqlalchemy.cli_support import (
    dbqueue,
    fail_jobs,
    fail_ticks,
    push_jobs,
    push_ticks,
    start,
    stats,
)
from tests.sqlalchemy.handlers_app import ChoreBase
from tests.sqlalchemy.models import Job, Tick

pytestmark = pytest.mark.sqlalchemy

APP = "tests.sqlalchemy.handlers_app"


@pytest.fixture
def all_tables(engine: sa.Engine) -> Iterator[sa.Engine]:
    """Every queue handlers_app has a handler for (Chore's tables too)."""
    ChoreBase.metadata.create_all(engine)
    yield engine
    ChoreBase.metadata.drop_all(engine)


@pytest.fixture(autouse=True)
def no_cli_log_handler() -> Iterator[None]:
    """main() run in process adds its log handler on the captured stderr: remove it after."""
    yield
    logger = logging.getLogger("dbqueue")
    for h in [h for h in logger.handlers if getattr(h, "_dbqueue_stderr", False)]:
        logger.removeHandler(h)


def job_states(engine: sa.Engine) -> dict[State, int]:
    meta = Job.__queue_meta__
    with engine.connect() as connection:
        rows = connection.execute(sa.select(meta.c.state, sa.func.count()).group_by(meta.c.state))
        return {State(state): n for state, n in rows}


# -- worker -------------------------------------------------------------------------------------


def test_a_burst_worker_drains_the_queues_and_exits_0(all_tables: sa.Engine, url: str) -> None:
    push_jobs(all_tables, 25)
    push_ticks(all_tables, "A", "B", "C")
    done = dbqueue("worker", "--url", url, APP, "--burst", "--concurrency", "2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("28 handled, 0 failed, ")
    assert "worker started: 2 thread(s) on sa_chore, sa_job, sa_tick" in done.stderr
    assert stats(all_tables, Job)["ready"] == stats(all_tables, Tick)["ready"] == 0


def test_options_and_one_queue(engine: sa.Engine, url: str) -> None:
    push_jobs(engine, 30)
    push_ticks(engine, "A")
    args = ["--queue", "sa_job", "--batch-size", "4", "--max-messages", "10", "-v", "0"]
    done = dbqueue("worker", "--url", url, APP, *args)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("10 handled, 0 failed, 0 attempt(s) to retry, 3 batches")
    assert done.stderr == ""  # -v 0: warnings only
    assert stats(engine, Job)["ready"] == 20
    assert stats(engine, Tick)["ready"] == 1  # not asked for


def test_a_worker_stops_on_sigterm_and_exits_0(
    all_tables: sa.Engine, url: str, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    proc = start("worker", "--url", url, APP, log=log)
    try:
        wait_for(lambda: "worker started" in log.read_text(), "the worker starts", log)
        push_jobs(all_tables, 12)
        wait_for(lambda: not job_states(all_tables), "the jobs are handled and acked", log)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(PATIENCE) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = log.read_text()
    assert "SIGTERM: finishing the items already started, releasing the rest" in output
    assert "12 handled, 0 failed" in output


# -- stats --------------------------------------------------------------------------------------


def test_stats_finds_every_queue_in_the_database(engine: sa.Engine, url: str) -> None:
    fail_jobs(engine, 1)  # first: it fails whatever it pops
    push_jobs(engine, 2)
    push_ticks(engine, "A", "B", "C")
    done = dbqueue("stats", "--url", url)
    assert done.returncode == 0, done.stderr
    header, *lines = done.stdout.splitlines()
    assert header.split()[:8] == [
        "queue", "layout", "ready", "scheduled", "leased", "expired", "done", "failed",
    ]  # fmt: skip
    rows = {line.split()[0]: line.split() for line in lines}
    assert rows["sa_job"][1:8] == ["split", "2", "0", "0", "0", "0", "1"]
    assert rows["sa_job"][-2:] == ["-", "-"]
    assert rows["sa_tick"][1:8] == ["ring", "3", "0", "0", "0", "0", "0"]
    assert rows["sa_tick"][-2:] == ["8", "37.5%"]
    assert (rows["sa_job"][8], rows["sa_tick"][8]) == ("-", "0")


def test_stats_as_json_of_the_declared_queues(engine: sa.Engine, url: str) -> None:
    push_jobs(engine, 3)
    push_ticks(engine, "A", "B")
    done = dbqueue("stats", "--url", url, "tests.sqlalchemy.models", "--json")
    assert done.returncode == 0, done.stderr
    job, tick = json.loads(done.stdout)["queues"]
    assert (job["queue"], job["layout"], job["ready"], job["capacity"]) == (
        "sa_job", "split", 3, None,
    )  # fmt: skip
    assert job["oldest_ready_age"] >= 0
    assert (tick["queue"], tick["layout"], tick["ready"]) == ("sa_tick", "ring", 2)
    assert (tick["capacity"], tick["occupancy"]) == (8, 0.25)


def test_stats_of_a_declared_queue_whose_tables_are_missing(engine: sa.Engine, url: str) -> None:
    done = dbqueue("stats", "--url", url, APP, "--json")  # Chore's tables were not created
    assert done.returncode == 1
    rows = {r["queue"]: r for r in json.loads(done.stdout)["queues"]}
    assert rows["sa_chore"] == {
        "queue": "sa_chore",
        "layout": "split",
        "error": "its tables do not exist in this database",
    }
    assert rows["sa_job"]["ready"] == 0
    assert "the tables of sa_chore do not exist in this database" in done.stderr


# -- retry and purge ----------------------------------------------------------------------------


def test_retry_by_id(engine: sa.Engine, url: str) -> None:
    first, _, third = fail_jobs(engine, 3)
    done = dbqueue("retry", "--url", url, "--queue", "sa_job", "--id", str(first), str(third))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "retried 2 of 2 item(s) of sa_job\n"
    assert job_states(engine) == {State.READY: 2, State.FAILED: 1}
    done = dbqueue("retry", "--url", url, "--queue", "sa_job", "--id", str(first), "--id", "999")
    assert done.stdout == "retried 0 of 2 item(s) of sa_job\n"
    assert "2 item(s) were not failed items: they were left as they were" in done.stderr


def test_retry_all_in_batches_with_progress(engine: sa.Engine, url: str) -> None:
    fail_jobs(engine, 25)
    done = dbqueue("retry", "--url", url, "--queue", "sa_job", "--all", "--batch-size", "10")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == ["retried 10 / 25", "retried 20 / 25", "retried 25 / 25"]
    assert done.stdout == "retried 25 of 25 item(s) of sa_job\n"
    assert job_states(engine) == {State.READY: 25}
    again = dbqueue("retry", "--url", url, "--queue", "sa_job", "--all")
    assert again.stdout == "no failed items in sa_job: nothing to retry\n"


def test_retry_all_of_a_ring(engine: sa.Engine, url: str) -> None:
    fail_ticks(engine, "A", "B", "C")
    assert stats(engine, Tick)["failed"] == 3
    done = dbqueue("retry", "--url", url, "--queue", "sa_tick", "--all")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "retried 3 of 3 item(s) of sa_tick\n"
    assert (stats(engine, Tick)["ready"], stats(engine, Tick)["failed"]) == (3, 0)


def test_purge_in_batches_with_progress(engine: sa.Engine, url: str) -> None:
    fail_jobs(engine, 2)
    push_jobs(engine, 25)
    args = ["--queue", "sa_job", "--state", "ready", "--yes", "--batch-size", "10"]
    done = dbqueue("purge", "--url", url, *args)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == ["purged 10 / 25", "purged 20 / 25", "purged 25 / 25"]
    assert done.stdout == "purged 25 ready item(s) of sa_job\n"
    assert job_states(engine) == {State.FAILED: 2}
    with engine.connect() as connection:  # the data rows went with the meta rows
        assert connection.scalar(sa.select(sa.func.count()).select_from(Job)) == 2
    again = dbqueue("purge", "--url", url, *args)
    assert again.stdout == "no ready items in sa_job: nothing to purge\n"


def test_purge_tells_ready_items_from_scheduled_ones(engine: sa.Engine, url: str) -> None:
    push_jobs(engine, 3)
    with Session(engine) as session, session.begin():
        Job.queue.push_many(session, [{"name": "later"}] * 2, delay=dt.timedelta(hours=1))
    args = ["--url", url, "--queue", "sa_job", "--yes"]
    done = dbqueue("purge", *args, "--state", "ready")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "purged 3 ready item(s) of sa_job\n"
    assert (stats(engine, Job)["ready"], stats(engine, Job)["scheduled"]) == (0, 2)
    done = dbqueue("purge", *args, "--state", "scheduled")
    assert done.stdout == "purged 2 scheduled item(s) of sa_job\n"
    assert job_states(engine) == {}


def test_purge_scheduled_messages_of_a_ring(engine: sa.Engine, url: str) -> None:
    push_ticks(engine, "A", "B")
    with Session(engine) as session, session.begin():
        (later, _) = Tick.queue.pop_batch(session, 2)
        Tick.queue.fail(session, [later], "again in an hour", delay=dt.timedelta(hours=1))
    args = ["--url", url, "--queue", "sa_tick", "--yes", "--state"]
    none = dbqueue("purge", *args, "ready")  # the leased one is not ready, the other not due
    assert none.stdout == "no ready items in sa_tick: nothing to purge\n"
    done = dbqueue("purge", *args, "scheduled")
    assert done.stdout == "purged 1 scheduled item(s) of sa_tick\n"
    assert (stats(engine, Tick)["scheduled"], stats(engine, Tick)["leased"]) == (0, 1)


def test_purge_asks_first(engine: sa.Engine, url: str) -> None:
    fail_jobs(engine, 3)
    args = ["--url", url, "--queue", "sa_job", "--state", "failed"]
    declined = dbqueue("purge", *args, stdin="n\n")
    assert declined.returncode == 1
    assert declined.stderr.startswith("Delete 3 failed item(s) of queue 'sa_job'? [y/N] \n")
    assert "aborted: nothing was deleted" in declined.stderr
    assert dbqueue("purge", *args, stdin="").returncode == 1  # no answer: no
    assert job_states(engine) == {State.FAILED: 3}
    accepted = dbqueue("purge", *args, stdin="y\n")
    assert accepted.returncode == 0, accepted.stderr
    assert accepted.stdout == "purged 3 failed item(s) of sa_job\n"
    assert job_states(engine) == {}


def test_purge_every_message_of_a_ring(engine: sa.Engine, url: str) -> None:
    fail_ticks(engine, "X", "Y")
    push_ticks(engine, "A", "B", "C")
    done = dbqueue("purge", "--url", url, "--queue", "sa_tick", "--state", "all", "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "purged 5 item(s) of sa_tick\n"
    assert (stats(engine, Tick)["ready"], stats(engine, Tick)["failed"]) == (0, 0)
    with Session(engine) as session:
        Tick.queue.check(session)  # the slots are all still there


# -- errors -------------------------------------------------------------------------------------


def test_a_worker_on_a_missing_table_exits_1(engine: sa.Engine, url: str) -> None:
    done = dbqueue("worker", "--url", url, APP, "--burst")  # Chore's tables were not created
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("dbqueue worker: error: queue 'sa_chore': its tables do not exist")
    assert "SQLAlchemy: metadata.create_all() or alembic upgrade" in last


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        # The handlers listed are this process's: other tests' modules may have added theirs.
        (["worker", APP, "--burst", "--queue", "nope"], 2, "unknown queue 'nope': the modules "
         "declare no queue class with that table (queues with a handler: "),
        (["worker", "no_such_module"], 2, "cannot import module 'no_such_module': "
         "ModuleNotFoundError: No module named 'no_such_module'"),
        (["purge", "--queue", "nope", "--state", "all", "--yes"], 2, "no queue 'nope' in this "
         "database (queues found: "),
    ],
)  # fmt: skip
def test_what_the_commands_refuse(
    engine: sa.Engine,
    url: str,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    code: int,
    message: str,
) -> None:
    command = args[0]
    assert main([command, "--url", url, *args[1:]]) == code
    err = capsys.readouterr().err
    assert message in err
    assert err.splitlines()[-1].startswith(f"dbqueue {command}: error: ")


def test_modules_without_handlers_are_refused(engine: sa.Engine, url: str) -> None:
    # A subprocess: this test process has handlers_app's handlers registered.
    done = dbqueue("worker", "--url", url, "tests.sqlalchemy.models")
    assert done.returncode == 2
    assert done.stderr == (
        "dbqueue worker: error: the modules register no handler: decorate a function with "
        "@dbqueue_sa.handler(YourQueueClass) in one of them\n"
    )


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("nonsense", "the database URL does not parse"),
        ("mysql://me@localhost/db", "dbqueue supports postgresql, sqlite; the URL names 'mysql'"),
        ("sqlite://", "an in-memory SQLite database cannot be shared"),
        ("", "no database: pass --url URL or set DBQUEUE_URL"),
    ],
)
def test_bad_urls(url: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stats", "--url", url]) == 2
    assert f"dbqueue stats: error: {message}" in capsys.readouterr().err


def test_an_unreachable_database_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stats", "--url", "postgresql://nobody@127.0.0.1:1/none"]) == 1
    assert "dbqueue stats: error: database error: connection" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args",
    [
        ["worker", "--url", "sqlite:///x.db"],  # no module
        ["worker", "--url", "sqlite:///x.db", APP, "--concurrency", "0"],
        ["retry", "--url", "sqlite:///x.db", "--queue", "q"],  # neither --id nor --all
        ["retry", "--url", "sqlite:///x.db", "--queue", "q", "--id", "1", "--all"],
        ["purge", "--url", "sqlite:///x.db", "--queue", "q", "--state", "gone"],
        [],
    ],
)
def test_usage_errors_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    assert "usage: dbqueue" in capsys.readouterr().err


# -- output -------------------------------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_rewrites_its_line() -> None:
    out = Terminal()
    progress = Progress("purged", 2500, out)
    for n in (1000, 1000, 500):
        progress.add(n)
    progress.finish()
    assert out.getvalue() == (
        "\rpurged 1,000 / 2,500\rpurged 2,000 / 2,500\rpurged 2,500 / 2,500\n"
    )


def test_progress_in_a_log_is_a_line_per_tenth() -> None:
    out = io.StringIO()
    progress = Progress("retried", 100, out)
    for _ in range(14):
        progress.add(7)  # 98
    progress.finish()
    lines = out.getvalue().splitlines()
    assert lines[0] == "retried 14 / 100"
    assert lines[-2:] == ["retried 91 / 100", "retried 98 / 100"]  # the last count, at the end
    assert len(lines) == 10


def test_progress_can_be_silenced() -> None:
    out = Terminal()
    progress = Progress("purged", 10, out, enabled=False)
    progress.add(10)
    progress.finish()
    assert out.getvalue() == ""
