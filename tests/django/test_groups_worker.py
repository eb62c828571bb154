"""The worker over a queue with consumer groups: a handler per group runs on that group's
deliveries (``runqueueworker``, ``--group``), and the worker's label, heartbeats,
``queuestats`` and ``queuehealth`` name the group (``testapp.FanoutJob[email]``)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from dbqueue_django import handler
from dbqueue_django.handlers import unregister
from dbqueue_django.worker import DjangoWorkerQueue
from dbqueue_django.worker_rows import QueueWorker
from tests.django.testapp.models import FanoutJob

pytestmark = [
    pytest.mark.django,
    pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
]
GROUPS = ("email", "search")


@contextmanager
def group_handlers(model: type[Any], groups: tuple[str, ...]) -> Iterator[list[tuple[str, str]]]:
    """A handler per group of ``model``, recording (group, subject); unregistered after."""
    seen: list[tuple[str, str]] = []
    for group in groups:

        def record(item: Any, group: str = group) -> None:
            seen.append((group, item.subject))

        record.__qualname__ = f"record_{group}"
        handler(model, group=group)(record)
    try:
        yield seen
    finally:
        for group in groups:
            unregister(model, group)


@pytest.fixture
def handled() -> Iterator[list[tuple[str, str]]]:
    """A handler per group of FanoutJob, recording (group, subject); unregistered after."""
    with group_handlers(FanoutJob, GROUPS) as seen:
        yield seen


def run(command: str, *args: str) -> str:
    out = io.StringIO()
    call_command(command, *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_each_item_is_handled_once_per_group(alias: str, handled: list[Any]) -> None:
    FanoutJob.queue.using(alias).push_many([{"subject": "a"}, {"subject": "b"}])
    summary = run("runqueueworker", "testapp.FanoutJob", "--burst", "--database", alias)
    assert summary.startswith("4 handled, 0 failed")
    assert sorted(handled) == [("email", "a"), ("email", "b"), ("search", "a"), ("search", "b")]
    assert not FanoutJob.objects.using(alias).exists()  # every group acked: the rows are gone
    beats = set(QueueWorker.objects.using(alias).values_list("queue", flat=True))
    assert {"testapp.FanoutJob[email]", "testapp.FanoutJob[search]"} <= beats


def test_group_selects_the_handlers_of_a_group(alias: str, handled: list[Any]) -> None:
    FanoutJob.queue.using(alias).push(subject="a")
    run("runqueueworker", "testapp.FanoutJob", "--burst", "--group", "search", "--database", alias)
    assert handled == [("search", "a")]
    assert FanoutJob.queue.using(alias).group("email").count() == 1
    assert FanoutJob.queue.using(alias).group("search").count() == 0
    FanoutJob.queue.using(alias).delete([FanoutJob.objects.using(alias).get().pk])


def test_a_group_no_selected_queue_has_is_refused(handled: list[Any]) -> None:
    with pytest.raises(
        CommandError, match=r"consumer group\(s\) audit; their groups: email, search"
    ):
        run("runqueueworker", "testapp.FanoutJob", "--burst", "--group", "audit")
    with pytest.raises(CommandError, match="audit; they have no groups"):
        run("runqueueworker", "testapp.Ping", "--burst", "--group", "audit")


def test_the_worker_queue_names_the_group(alias: str) -> None:
    queue = DjangoWorkerQueue(FanoutJob.queue.using(alias).group("email"))
    assert queue.name == f"testapp.FanoutJob[email]@{alias}"
    assert queue.queue.core.spec.group == "email"
    assert DjangoWorkerQueue(FanoutJob.queue.using(alias).group("email")).label == (
        "testapp.FanoutJob[email]"
    )


def test_queuestats_shows_a_row_per_group(alias: str) -> None:
    queue = FanoutJob.queue.using(alias)
    item = queue.push(subject="a")
    assert len(queue.group("email").pop_batch(1)) == 1
    rows = json.loads(run("queuestats", "testapp.FanoutJob", "--json", "--database", alias))
    by_label = {r["queue"]: r for r in rows["queues"]}
    assert set(by_label) == {"testapp.FanoutJob[email]", "testapp.FanoutJob[search]"}
    assert (
        by_label["testapp.FanoutJob[email]"]["leased"],
        by_label["testapp.FanoutJob[email]"]["ready"],
    ) == (1, 0)
    assert by_label["testapp.FanoutJob[search]"]["ready"] == 1
    queue.delete([item])


def test_queuehealth_checks_each_group(alias: str) -> None:
    with pytest.raises(SystemExit):
        out = io.StringIO()
        call_command("queuehealth", "testapp.FanoutJob", "--database", alias, stdout=out)
    text = out.getvalue()
    for group in GROUPS:
        assert f"testapp.FanoutJob[{group}]@{alias}" in text
