"""``manage.py queuehealth``: exit 0 with a recent worker heartbeat and a young backlog, 1
with a line per problem (no heartbeat, a stale or stopped one, an old ready item), 2 for bad
usage."""

from __future__ import annotations

import datetime as dt
import io
import json
import time

import pytest
from django.core.management import call_command

from dbqueue.worker import WorkerReport
from dbqueue_django.worker_rows import QueueWorker, record_beat
from tests.django.commands import run_command
from tests.django.testapp.models import Ping

pytestmark = [
    pytest.mark.django,
    pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
]


def queuehealth(*args: str) -> tuple[int, str]:
    """The exit status and the output."""
    out = io.StringIO()
    try:
        call_command("queuehealth", *args, stdout=out, stderr=io.StringIO())
    except SystemExit as exc:
        return int(exc.code or 0), out.getvalue()
    return 0, out.getvalue()


def beat(alias: str, *, stopped: bool = False) -> None:
    """A heartbeat of a worker serving testapp.Ping, as its maintenance thread writes it."""
    report = WorkerReport("w1", "h", 1, dt.datetime.now(dt.UTC), stopped, ())
    record_beat(alias, report, [("testapp.Ping", 3, 0)])


def test_a_live_worker_and_a_young_backlog_are_healthy(alias: str) -> None:
    beat(alias)
    Ping.queue.using(alias).push(message="waiting")
    code, out = queuehealth("testapp.Ping", "--database", alias)
    assert (code, out) == (0, f"healthy: testapp.Ping@{alias}\n")


def test_no_heartbeat_is_unhealthy(alias: str) -> None:
    code, out = queuehealth("testapp.Ping", "--database", alias)
    assert code == 1
    assert out == (
        f"unhealthy: testapp.Ping@{alias}: no running worker sent a recent heartbeat (never)\n"
    )


def test_a_stale_heartbeat_is_unhealthy(alias: str) -> None:
    beat(alias)
    an_hour_ago = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    QueueWorker.objects.using(alias).update(seen_at=an_hour_ago)
    code, out = queuehealth("testapp.Ping", "--database", alias)
    assert code == 1
    assert f"no running worker sent a recent heartbeat (last at {an_hour_ago:%F %T} UTC)" in out
    # Within a longer bound, the same heartbeat is recent enough.
    assert queuehealth("testapp.Ping", "--database", alias, "--max-heartbeat-age", "7200")[0] == 0


def test_a_stopped_worker_is_not_alive(alias: str) -> None:
    beat(alias, stopped=True)
    code, out = queuehealth("testapp.Ping", "--database", alias)
    assert code == 1
    assert "(never)" in out  # no running worker ever beat


def test_an_old_ready_item_is_unhealthy(alias: str) -> None:
    beat(alias)
    Ping.queue.using(alias).push(message="old")
    time.sleep(0.05)  # the item is now older than the bound below
    code, out = queuehealth("testapp.Ping", "--database", alias, "--max-age", "0.01", "--json")
    assert code == 1
    document = json.loads(out)
    assert document["healthy"] is False
    (problem,) = document["problems"]
    assert problem.startswith(f"testapp.Ping@{alias}: the oldest ready item has waited ")
    assert problem.endswith(", more than 0.0 s")
    (row,) = document["queues"]
    assert row["worker_alive"] is True and row["oldest_ready_age"] > 0.01


@pytest.mark.parametrize(
    "args",
    [
        ("--max-age", "-1"),
        ("--max-heartbeat-age", "soon"),
        ("nope.Model",),
        ("testapp.Ping", "--database", "nowhere"),
    ],
)
def test_bad_usage_exits_2(args: tuple[str, ...]) -> None:
    done = run_command("queuehealth", *args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip()
