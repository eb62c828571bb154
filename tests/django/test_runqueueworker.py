"""``manage.py runqueueworker``: options, queue selection and its errors."""

from __future__ import annotations

import io
import logging
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connections
from django.db.backends.dummy.base import DatabaseWrapper as DummyDatabaseWrapper
from django.test import override_settings

from dbqueue_django import handlers as handlers_module
from tests.django.commands import (
    PATIENCE,
    assert_one_line_error,
    command_env,
    run_command,
    start_command,
    wait_for,
)
from tests.django.testapp.handlers import RECEIVED
from tests.django.testapp.models import Ping

pytestmark = [
    pytest.mark.django,
    pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
]


@pytest.fixture(autouse=True)
def received() -> Iterator[list[str]]:
    RECEIVED.clear()
    yield RECEIVED
    RECEIVED.clear()
    logging.getLogger("dbqueue").handlers.clear()


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("runqueueworker", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.mark.postgresql
def test_burst_runs_every_queue_with_a_handler(received: list[str]) -> None:
    Ping.queue.push_many([{"message": f"m{i}"} for i in range(12)])
    assert run("--burst").startswith("12 handled, 0 failed, 0 attempt(s) to retry, 2 batches in ")
    assert len(received) == 12


@pytest.mark.postgresql
def test_max_messages_concurrency_and_batch_size(received: list[str]) -> None:
    Ping.queue.push_many([{"message": f"m{i}"} for i in range(30)])
    out = run("testapp.Ping", "--max-messages", "7", "--concurrency", "2", "--batch-size", "3")
    assert out.startswith("7 handled")
    assert Ping.queue.stats()["ready"] == 23


@pytest.mark.sqlite
def test_another_database(received: list[str]) -> None:
    Ping.queue.using("sqlite").push(message="on sqlite")
    assert run("--burst", "--database", "sqlite").startswith("1 handled")
    assert received == ["on sqlite"]


@pytest.mark.postgresql
def test_batches_are_logged_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    Ping.queue.push(message="x")
    with caplog.at_level(logging.DEBUG, logger="dbqueue"):
        run("--burst", "--log-level", "debug")
    (batch,) = [r for r in caplog.records if "testapp.Ping@default: 1 item(s), 1 ok" in r.message]
    assert batch.levelno == logging.DEBUG


@pytest.mark.postgresql
def test_summary_and_health_file_options(tmp_path: Path) -> None:
    """The options reach the worker: a summary every 0.1 s at INFO (the default level) and
    the health file touched, in a real process stopped by SIGTERM."""
    health = tmp_path / "alive"
    log = tmp_path / "worker.log"
    proc = start_command(
        "runqueueworker", "testapp.Ping", "--summary-every", "0.1", "--health-file",
        str(health), log=log, env=command_env(),
    )  # fmt: skip
    try:
        summarized = lambda: health.exists() and "summary of the last" in log.read_text()  # noqa: E731
        wait_for(summarized, "a summary and the health file", log)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(PATIENCE) == 0, log.read_text()
    line = next(x for x in log.read_text().splitlines() if "summary of the last" in x)
    assert " INFO dbqueue-maintenance summary of the last 0 s: 0 handled, 0 failed" in line
    assert "oldest ready: testapp.Ping@default -" in line


@pytest.mark.parametrize("value", ["-1", "soon"])
def test_summary_every_must_be_seconds(value: str) -> None:
    done = run_command("runqueueworker", "--summary-every", value)
    assert done.returncode == 2
    assert "--summary-every" in done.stderr


@pytest.mark.parametrize(
    ("label", "message"),
    [
        ("nope.Model", "'nope.Model' is not an installed model"),
        ("notalabel", "'notalabel' is not an installed model"),
        ("auth.User", "'auth.User' is not a queue model"),
        ("testapp.Job", "'testapp.Job' has no handler"),
    ],
)
def test_queues_that_cannot_be_run_are_refused(label: str, message: str) -> None:
    with pytest.raises(CommandError, match=message):
        run(label, "--burst")


@override_settings(TASKS={})  # no Tasks backend either, so the task queue has no handler
def test_no_handler_at_all_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handlers_module._REGISTRY, "_handlers", {})
    with pytest.raises(CommandError, match="no queue has a handler"):
        run("--burst")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "0"], "argument --concurrency: must be at least 1, got 0"),
        (["--batch-size", "x"], "argument --batch-size: 'x' is not an integer"),
        (["--max-messages", "-1"], "argument --max-messages: must be at least 1, got -1"),
        (["--reconnect-for", "0"], "argument --reconnect-for: must be a positive number"),
        (["--reconnect-for", "nan"], "argument --reconnect-for: must be a positive number"),
        (["--reconnect-for", "soon"], "argument --reconnect-for: 'soon' is not a number"),
        (["--log-level", "loud"], "argument --log-level: invalid choice: 'LOUD'"),
        (["--database", "nosuchdb"], "no database alias 'nosuchdb' in settings.DATABASES"),
        (["--reload", "--burst"], "--reload restarts a worker that runs until it is stopped"),
        (["--reload", "--max-messages", "5"], "does not go with --burst or --max-messages"),
    ],
)
def test_bad_options_are_refused(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=re.escape(message)):
        run(*args)


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_a_database_dbqueue_does_not_support_is_refused() -> None:
    connections["legacy"] = DummyDatabaseWrapper({"ENGINE": "django.db.backends.dummy"}, "legacy")
    try:
        with pytest.raises(CommandError, match="database alias 'legacy' uses 'unknown'"):
            run("testapp.Ping", "--database", "legacy", "--burst")
    finally:
        del connections["legacy"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--database", "nosuchdb"], "CommandError: no database alias 'nosuchdb'"),
        (["nope.Model"], "CommandError: 'nope.Model' is not an installed model"),
        (["testapp.Job"], "CommandError: 'testapp.Job' has no handler"),
        (["--reload", "--burst"], "CommandError: --reload restarts a worker"),
        (["--concurrency", "0"], "error: argument --concurrency: must be at least 1, got 0"),
    ],
)
def test_a_refusal_ends_the_process_with_one_line(args: list[str], message: str) -> None:
    assert_one_line_error(run_command("runqueueworker", "--burst", *args), message)


@pytest.fixture
def reloading(alias: str, tmp_path: Path) -> Iterator[Reloading]:
    """``runqueueworker testapp.Ping --reload`` on ``alias``, stopped with Ctrl-C after."""
    reloading = Reloading(alias, tmp_path)
    yield reloading
    reloading.stop()


class Reloading:
    """A worker run with --reload, whose settings module is a source file the test changes."""

    def __init__(self, alias: str, tmp_path: Path) -> None:
        self.settings = tmp_path / "reload_settings.py"
        self.settings.write_text("from tests.django.worker_settings import *  # noqa: F403\n")
        env = command_env("reload_settings")
        env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
        self.log = tmp_path / "worker.log"
        args = ["testapp.Ping", f"--database={alias}", "--reload"]
        self.proc = start_command(
            "runqueueworker", *args, log=self.log, env=env, start_new_session=True
        )
        self.returncode: int | None = None

    def text(self) -> str:
        return self.log.read_text()

    def starts(self) -> int:
        return self.text().count("worker started: ")

    def change_a_source_file_until(self, restarted: int) -> None:
        """Touch the settings module until the worker started ``restarted`` times (the
        reloader's first look may come after a change: that is no change to it)."""
        deadline, bump = time.monotonic() + PATIENCE, 0
        while self.starts() < restarted:
            assert self.proc.poll() is None, self.text()
            assert time.monotonic() < deadline, f"no restart; log:\n{self.text()}"
            bump += 1
            os.utime(self.settings, (time.time() + bump, time.time() + bump))
            time.sleep(0.5)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)  # Ctrl-C: to the reloader and its worker
        self.returncode = self.proc.wait(PATIENCE)


@pytest.mark.slow
def test_reload_restarts_the_worker_when_a_source_file_changes(
    alias: str, reloading: Reloading
) -> None:
    wait_for(lambda: reloading.starts() == 1, "the worker starts", reloading.log)
    reloading.change_a_source_file_until(restarted=2)
    assert "A source file changed: restarting the worker." in reloading.text()
    Ping.queue.using(alias).push(message="after the restart")
    wait_for(lambda: not Ping.queue.using(alias).items().exists(), "it is handled", reloading.log)
    reloading.stop()
    assert reloading.returncode == 0, reloading.text()
    # The worker stopped cleanly each time, and printed its totals.
    assert reloading.text().count("worker stopped: ") == 2, reloading.text()
    last = reloading.text().rstrip().splitlines()[-1]
    assert last.startswith("1 handled, 0 failed, 0 attempt(s) to retry, 1 batches in ")
    assert "Traceback" not in reloading.text()


@pytest.mark.slow
def test_reload_waits_for_a_change_after_an_error(alias: str, tmp_path: Path) -> None:
    table = connections[alias].ops.quote_name(Ping._meta.db_table)

    def rename(old: str, new: str) -> None:
        with connections[alias].cursor() as cursor:
            cursor.execute(f"ALTER TABLE {old} RENAME TO {new}")

    rename(table, "hidden_ping")  # as if its migration had not run
    hidden = True
    reloading = Reloading(alias, tmp_path)
    try:
        waiting = "Waiting for a source file to change."
        wait_for(lambda: waiting in reloading.text(), "the error is shown", reloading.log)
        assert "tables do not exist in this database" in reloading.text()
        rename("hidden_ping", table)
        hidden = False
        reloading.change_a_source_file_until(restarted=2)
        Ping.queue.using(alias).push(message="now it works")
        wait_for(lambda: not Ping.queue.using(alias).items().exists(), "handled", reloading.log)
    finally:
        reloading.stop()
        if hidden:
            rename("hidden_ping", table)
    assert reloading.returncode == 0, reloading.text()
    assert "Traceback" not in reloading.text()
