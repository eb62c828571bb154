"""``manage.py purgequeue``: one state's items deleted (ready and scheduled apart), only the
old ones with --older-than, after a confirmation unless --noinput; and what it refuses."""

from __future__ import annotations

import datetime as dt
import io
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.db import connections

from tests.django.commands import assert_one_line_error, run_command
from tests.django.testapp.models import Ping, Tick

pytestmark = [
    pytest.mark.django,
    pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
]
READY = ["testapp.Ping", "--state", "ready"]


def purgequeue(*args: str) -> str:
    out = io.StringIO()
    call_command("purgequeue", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def pushed_long_ago(alias: str, ids: list[int]) -> None:
    table = connections[alias].ops.quote_name(Ping._meta.db_table)
    with connections[alias].cursor() as cursor:
        for item_id in ids:
            cursor.execute(
                f"UPDATE {table} SET enqueued_at = %s WHERE id = %s",
                [dt.datetime(2000, 1, 1, tzinfo=dt.UTC), item_id],
            )


def test_only_the_state_asked_for(alias: str) -> None:
    ping = Ping.queue.using(alias)
    ping.push_many([{"message": m} for m in "abc"])
    ping.push(message="later", delay=dt.timedelta(hours=1))
    ping.pop_batch(1)
    out = purgequeue("testapp.Ping", "--state", "ready", "--noinput", "--database", alias)
    assert out == f"Deleted 2 ready items of testapp.Ping (database {alias!r}).\n"
    stats = ping.stats()
    assert (stats["ready"], stats["scheduled"], stats["leased"]) == (0, 1, 1)
    out = purgequeue("testapp.Ping", "--state", "scheduled", "--no-input", "--database", alias)
    assert out.startswith("Deleted 1 scheduled items")
    out = purgequeue("testapp.Ping", "--state", "failed", "--noinput", "--database", alias)
    assert out == f"No failed items of testapp.Ping (database {alias!r}): nothing to purge.\n"
    assert ping.stats()["leased"] == 1


def test_a_ring_s_scheduled_messages(alias: str) -> None:
    tick = Tick.queue.using(alias)
    tick.push_many([{"symbol": s, "price": Decimal(1)} for s in "AB"])
    (later,) = tick.pop_batch(1)
    tick.fail([later], "again in an hour", delay=dt.timedelta(hours=1))
    out = purgequeue("testapp.Tick", "--state", "scheduled", "--noinput", "--database", alias)
    assert out.startswith("Deleted 1 scheduled items of testapp.Tick")
    assert (tick.stats()["ready"], tick.stats()["scheduled"]) == (1, 0)


def test_older_than(alias: str) -> None:
    ping = Ping.queue.using(alias)
    old, _ = ping.push_many([{"message": "old"}, {"message": "new"}])
    pushed_long_ago(alias, [old])
    args = ["testapp.Ping", "--state", "ready", "--older-than", "7d", "--database", alias]
    out = purgequeue(*args, "--noinput")
    assert (
        out
        == f"Deleted 1 ready items of testapp.Ping (database {alias!r}) pushed more than 7d ago.\n"
    )
    assert [p.message for p in ping.items()] == ["new"]
    assert purgequeue(*args, "--noinput").startswith("No ready items")


def test_it_asks_first(alias: str, monkeypatch: pytest.MonkeyPatch) -> None:
    ping = Ping.queue.using(alias)
    ping.push_many([{"message": m} for m in "abc"])
    ping.fail(ping.pop_batch(3), "broken", retry=False)
    questions: list[str] = []
    answers = iter(["no", "yes"])

    def answer(question: str) -> str:
        questions.append(question)
        return next(answers)

    monkeypatch.setattr("builtins.input", answer)
    args = ["testapp.Ping", "--state", "failed", "--database", alias]
    assert purgequeue(*args) == "Purge cancelled: nothing was deleted.\n"
    assert ping.stats()["failed"] == 3
    assert questions[0] == (
        f"You are about to delete 3 failed items of testapp.Ping (database {alias!r}).\n"
        "Type 'yes' to continue, or 'no' to cancel: "
    )
    assert purgequeue(*args).startswith("Deleted 3 failed items")
    assert ping.stats()["failed"] == 0


def test_the_end_of_input_is_a_no(alias: str) -> None:
    Ping.queue.using(alias).push(message="x")
    done = run_command("purgequeue", *READY, f"--database={alias}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("Purge cancelled: nothing was deleted.\n")
    assert Ping.queue.using(alias).stats()["ready"] == 1
    yes = run_command(
        "purgequeue", "testapp.Ping", "--state", "ready", f"--database={alias}", stdin="yes\n"
    )
    assert yes.stdout.endswith(f"Deleted 1 ready items of testapp.Ping (database {alias!r}).\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope.Model", "--state", "ready"], "'nope.Model' is not an installed model"),
        (["auth.User", "--state", "ready"], "'auth.User' is not a queue model"),
        (["testapp.Ping"], "the following arguments are required: --state"),
        (["testapp.Ping", "--state", "finished"], "argument --state: invalid choice: 'finished'"),
        ([*READY, "--older-than", "7x"], "--older-than: '7x' is not a duration"),
        ([*READY, "--older-than", "0s"], "--older-than: the duration must be more than 0"),
        ([*READY, "--database", "nosuchdb"], "no database alias 'nosuchdb'"),
    ],
)
def test_what_purgequeue_refuses(args: list[str], message: str) -> None:
    Ping.queue.push(message="kept")
    with pytest.raises(CommandError, match=message):
        purgequeue(*args, "--noinput")
    assert Ping.queue.stats()["ready"] == 1


def test_a_refusal_is_one_line_without_a_traceback() -> None:
    done = run_command("purgequeue", "testapp.Ping", "--state", "ready", "--older-than", "soon")
    assert_one_line_error(done, "CommandError: --older-than: 'soon' is not a duration")
