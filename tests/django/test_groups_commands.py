"""The management commands that act on items, on a queue with consumer groups: each acts on
the group ``--group`` names (``cancelqueueitem``, ``purgequeue``), and refuses in one line a
queue with groups without it, a group the queue does not have, and a group on a queue without
groups. Run as real processes on both test databases."""

from __future__ import annotations

import pytest

from dbqueue.message import State
from tests.django.commands import assert_one_line_error, run_command
from tests.django.testapp.models import FanoutJob

pytestmark = [
    pytest.mark.django,
    pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
]


def test_cancelqueueitem_cancels_in_the_group_it_names(alias: str) -> None:
    queue = FanoutJob.queue.using(alias)
    item = queue.push(subject="a")
    done = run_command(
        "cancelqueueitem", "testapp.FanoutJob", str(item), "--group", "email", "--database", alias
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"{item}: cancelled: it will never run"]
    assert queue.group("email").count("cancelled") == 1
    assert queue.group("search").count("ready") == 1


def test_purgequeue_purges_the_group_it_names(alias: str) -> None:
    queue = FanoutJob.queue.using(alias)
    queue.push_many([{"subject": "a"}, {"subject": "b"}])
    done = run_command(
        "purgequeue", "testapp.FanoutJob", "--state", "ready", "--group", "search",
        "--database", alias, "--no-input",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Deleted 2 ready items of testapp.FanoutJob[search]" in done.stdout
    assert queue.group("search").count() == 0
    assert queue.group("email").count(State.READY.name.lower()) == 2


@pytest.mark.parametrize("command", ["cancelqueueitem", "purgequeue"])
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["testapp.FanoutJob"], "name the one to act on with --group"),
        (["testapp.FanoutJob", "--group", "sms"], "--group 'sms': testapp.FanoutJob has the "
                                                  "consumer groups email, search"),
        (["testapp.Ping", "--group", "email"], "--group 'email': testapp.Ping has no consumer"),
    ],
)  # fmt: skip
def test_a_missing_or_unknown_group_is_refused_in_one_line(
    command: str, args: list[str], message: str
) -> None:
    extra = ["1"] if command == "cancelqueueitem" else ["--state", "failed", "--no-input"]
    assert_one_line_error(run_command(command, *args[:1], *extra, *args[1:]), message)
