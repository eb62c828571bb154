"""``manage.py runqueueworker``: options, queue selection and its errors."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from dbqueue_django import handlers as handlers_module
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
def test_batches_are_logged_at_info(caplog: pytest.LogCaptureFixture) -> None:
    Ping.queue.push(message="x")
    with caplog.at_level(logging.INFO, logger="dbqueue"):
        run("--burst", "--log-level", "info")
    assert any(
        "testapp.Ping@default: 1 item(s), 1 ok, 0 failed" in r.message for r in caplog.records
    )


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
    "args", [["--concurrency", "0"], ["--batch-size", "x"], ["--max-messages", "-1"]]
)
def test_bad_numbers_are_refused(args: list[str]) -> None:
    with pytest.raises(CommandError, match=r"is not an integer|must be at least"):
        run(*args)
