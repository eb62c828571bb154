"""The worker over a ring with consumer groups: a handler per group runs on that group's
deliveries (``runqueueworker``, ``--group``), and the worker's label, heartbeats,
``queuestats``, ``queuehealth``, the metrics view and ``purgequeue`` name the group
(``testapp.FanoutTick[email]``); ``cancelqueueitem`` keeps refusing a ring."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import CommandError

from dbqueue_django.worker import DjangoWorkerQueue
from dbqueue_django.worker_rows import QueueWorker
from tests.django.commands import run_command
from tests.django.test_groups_worker import group_handlers, run
from tests.django.test_ring_groups import GROUPS, drain
from tests.django.testapp.models import FanoutTick

pytestmark = [
    pytest.mark.django,
    pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
]


@pytest.fixture
def handled(alias: str) -> Iterator[list[tuple[str, str]]]:
    """A handler per group of FanoutTick, recording (group, subject); unregistered and the
    ring drained after."""
    with group_handlers(FanoutTick, GROUPS) as seen:
        yield seen
    drain(alias)


def test_each_message_is_handled_once_per_group(alias: str, handled: list[Any]) -> None:
    FanoutTick.queue.using(alias).push_many([{"subject": "a"}, {"subject": "b"}])
    summary = run("runqueueworker", "testapp.FanoutTick", "--burst", "--database", alias)
    assert summary.startswith("4 handled, 0 failed")
    assert sorted(handled) == [("email", "a"), ("email", "b"), ("search", "a"), ("search", "b")]
    for group in GROUPS:
        assert FanoutTick.queue.using(alias).group(group).count() == 0
    beats = set(QueueWorker.objects.using(alias).values_list("queue", flat=True))
    assert {"testapp.FanoutTick[email]", "testapp.FanoutTick[search]"} <= beats


def test_group_selects_the_handlers_of_a_group(alias: str, handled: list[Any]) -> None:
    FanoutTick.queue.using(alias).push(subject="a")
    run(
        "runqueueworker", "testapp.FanoutTick", "--burst", "--group", "search",
        "--database", alias,
    )  # fmt: skip
    assert handled == [("search", "a")]
    assert FanoutTick.queue.using(alias).group("email").count() == 1
    assert FanoutTick.queue.using(alias).group("search").count() == 0


def test_a_group_the_ring_lacks_is_refused(handled: list[Any]) -> None:
    with pytest.raises(
        CommandError, match=r"consumer group\(s\) audit; their groups: email, search"
    ):
        run("runqueueworker", "testapp.FanoutTick", "--burst", "--group", "audit")


def test_the_worker_queue_names_the_group(alias: str) -> None:
    queue = DjangoWorkerQueue(FanoutTick.queue.using(alias).group("email"))
    assert queue.name == f"testapp.FanoutTick[email]@{alias}"
    assert queue.label == "testapp.FanoutTick[email]"
    assert queue.queue.core.spec.group == "email"


def test_queuestats_shows_a_row_per_group(alias: str) -> None:
    queue = FanoutTick.queue.using(alias)
    queue.push(subject="a")
    try:
        assert len(queue.group("email").pop_batch(1)) == 1
        rows = json.loads(run("queuestats", "testapp.FanoutTick", "--json", "--database", alias))
        by_label = {r["queue"]: r for r in rows["queues"]}
        assert set(by_label) == {"testapp.FanoutTick[email]", "testapp.FanoutTick[search]"}
        email = by_label["testapp.FanoutTick[email]"]
        assert (email["leased"], email["ready"]) == (1, 0)
        assert by_label["testapp.FanoutTick[search]"]["ready"] == 1
    finally:
        drain(alias)


def test_queuehealth_checks_each_group(alias: str) -> None:
    done = run_command("queuehealth", "testapp.FanoutTick", "--database", alias)
    for group in GROUPS:
        assert f"testapp.FanoutTick[{group}]@{alias}" in done.stdout + done.stderr


def test_purgequeue_purges_the_group_it_names(alias: str) -> None:
    queue = FanoutTick.queue.using(alias)
    queue.push_many([{"subject": "a"}, {"subject": "b"}])
    try:
        done = run_command(
            "purgequeue", "testapp.FanoutTick", "--state", "ready", "--group", "search",
            "--database", alias, "--no-input",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "testapp.FanoutTick[search]" in done.stdout
        assert queue.group("search").count() == 0
        assert queue.group("email").count("ready") == 2
    finally:
        drain(alias)


def test_cancelqueueitem_keeps_refusing_a_ring(alias: str) -> None:
    done = run_command(
        "cancelqueueitem", "testapp.FanoutTick", "1", "--group", "email", "--database", alias
    )
    assert done.returncode != 0
    assert "ring" in done.stderr


@pytest.mark.postgresql
def test_the_metrics_view_reads_one_queue_per_group() -> None:
    from django.test import RequestFactory

    from dbqueue_django.views import metrics_view
    from tests.django.test_metrics import samples

    view = metrics_view([FanoutTick], cache_for=0)
    before = FanoutTick.queue.pushed()
    FanoutTick.queue.push_many([{"subject": "a"}, {"subject": "b"}])
    try:
        FanoutTick.queue.group("email").pop_batch(1)
        found = samples(view(RequestFactory().get("/m")).content.decode())
        email, search = (f"testapp.FanoutTick[{g}]@default" for g in GROUPS)
        assert found[("dbqueue_stats_up", (("queue", email),))] == 1
        assert found[("dbqueue_depth", (("queue", email), ("state", "leased")))] == 1
        assert found[("dbqueue_depth", (("queue", search), ("state", "ready")))] == 2
        assert found[("dbqueue_pushed_total", (("queue", search),))] == before + 2
    finally:
        drain("default")
