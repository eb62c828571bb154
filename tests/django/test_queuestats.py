"""``manage.py queuestats``: counts per state (ready and scheduled apart), the oldest ready
age and the live workers' throughput, as a table or JSON, once or every few seconds; and what
it refuses."""

from __future__ import annotations

import datetime as dt
import io
import json
import signal
import subprocess
import threading
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connections

from dbqueue.worker import WorkerReport
from dbqueue_django.worker_rows import QueueWorker, record_beat
from tests.django.commands import (
    PATIENCE,
    ROOT,
    assert_one_line_error,
    command_args,
    command_env,
    run_command,
)
from tests.django.testapp.models import Ping, Tick

pytestmark = [
    pytest.mark.django,
    pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
]


def queuestats(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("queuestats", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def beat(alias: str, worker_id: str, label: str, handled: int, failed: int = 0) -> None:
    started = dt.datetime.now(dt.UTC)
    record_beat(
        alias, WorkerReport(worker_id, "h", 1, started, False, ()), [(label, handled, failed)]
    )


@pytest.fixture
def queues(alias: str) -> str:
    """On ``alias``: Ping with 2 ready, 1 scheduled, 1 leased and 1 failed item, and a
    worker that handled 40 of them in the last minute; Tick with 1 ready and 1 leased."""
    ping = Ping.queue.using(alias)
    ping.push_many([{"message": m} for m in ("a", "b", "c", "d")])
    ping.push(message="later", delay=dt.timedelta(hours=1))
    first, _leased = ping.pop_batch(2)
    ping.fail([first], "broken", retry=False)
    tick = Tick.queue.using(alias)
    tick.push_many([{"symbol": s, "price": Decimal(1)} for s in "AB"])
    tick.pop_batch(1)
    beat(alias, "w1", "testapp.Ping", 30, 2)
    beat(alias, "w2", "testapp.Ping", 10)
    return alias


def test_json_has_every_count_and_the_throughput(queues: str) -> None:
    out, err = queuestats("testapp.Ping", "testapp.Tick", "--database", queues, "--json")
    assert err == ""
    document = json.loads(out)
    dt.datetime.fromisoformat(document["at"])
    ping, tick = document["queues"]
    assert {k: ping[k] for k in ("queue", "database", "layout")} == {
        "queue": "testapp.Ping",
        "database": queues,
        "layout": "split",
    }
    counts = ("ready", "scheduled", "leased", "failed", "done")
    assert [ping[k] for k in counts] == [2, 1, 1, 1, 0]
    assert isinstance(ping["oldest_ready_age"], float)
    assert (ping["handled_last_minute"], ping["failed_last_minute"], ping["workers"]) == (40, 2, 2)
    assert (ping["capacity"], ping["occupancy"]) == (None, None)
    assert [tick[k] for k in counts] == [1, 0, 1, 0, 0]
    assert (tick["layout"], tick["capacity"], tick["handled_last_minute"]) == ("ring", 8, 0)


def test_the_table_has_a_row_per_queue(queues: str) -> None:
    out, _ = queuestats("testapp.Tick", "testapp.Ping", "--database", queues)
    header, tick, ping = out.splitlines()
    assert header.split() == [
        "queue", "database", "layout", "ready", "scheduled", "leased", "failed", "done",
        "spilled", "oldest", "ready", "handled/min", "workers",
    ]  # fmt: skip
    assert (tick.split()[8], ping.split()[8]) == ("0", "-")
    assert tick.split()[:8] == ["testapp.Tick", queues, "ring", "1", "0", "1", "0", "0"]
    assert ping.split()[:8] == ["testapp.Ping", queues, "split", "2", "1", "1", "1", "0"]
    assert ping.split()[-2:] == ["40", "2"]
    assert ping.split()[-3] == "s"  # the oldest ready age, e.g. "0.2 s"


def test_every_queue_by_default(alias: str) -> None:
    out, _ = queuestats("--database", alias, "--json")
    labels = [q["queue"] for q in json.loads(out)["queues"]]
    assert labels == sorted(labels)
    assert {"testapp.Ping", "testapp.Tick", "dbqueue_django.TaskItem"} <= set(labels)


def test_a_database_without_the_heartbeat_table(alias: str) -> None:
    Ping.queue.using(alias).push(message="x")
    with connections[alias].schema_editor() as editor:
        editor.delete_model(QueueWorker)
    try:
        out, err = queuestats("testapp.Ping", "--database", alias, "--json")
        (ping,) = json.loads(out)["queues"]
        assert (ping["ready"], ping["handled_last_minute"], ping["workers"]) == (1, None, None)
        assert "heartbeat table (dbqueue_django.QueueWorker) does not exist" in err
        table, _ = queuestats("testapp.Ping", "--database", alias)
        assert table.splitlines()[1].split()[-2:] == ["-", "-"]
    finally:
        with connections[alias].schema_editor() as editor:
            editor.create_model(QueueWorker)
    out, _ = queuestats("testapp.Ping", "--database", alias, "--json")  # usable again
    assert json.loads(out)["queues"][0]["workers"] == 0


def test_a_queue_without_its_tables(alias: str) -> None:
    table = connections[alias].ops.quote_name(f"{Ping._meta.db_table}_meta")

    def rename(old: str, new: str) -> None:
        with connections[alias].cursor() as cursor:
            cursor.execute(f"ALTER TABLE {old} RENAME TO {new}")

    rename(table, "hidden_ping")  # as if its migration had not run (the stats read this one)
    try:
        out = io.StringIO()
        with pytest.raises(CommandError) as err:
            call_command(
                "queuestats", "testapp.Ping", "testapp.Tick", "--database", alias, stdout=out
            )
    finally:
        rename("hidden_ping", table)
    assert str(err.value) == (
        f"no stats for testapp.Ping (database {alias!r}): its tables do not exist in this "
        "database; run manage.py migrate"
    )
    _, ping, tick = out.getvalue().splitlines()
    assert ping.split()[3:] == ["?"] * 9
    assert tick.split()[3] == "0"  # the other queues are shown


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope.Model"], "'nope.Model' is not an installed model"),
        (["auth.User"], "'auth.User' is not a queue model"),
        (["--database", "nosuchdb"], "no database alias 'nosuchdb' in settings.DATABASES"),
        (["--watch", "0"], "must be a positive number"),
        (["--watch", "soon"], "'soon' is not a number"),
    ],
)
def test_what_queuestats_refuses(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        queuestats(*args)


def test_a_refusal_is_one_line_without_a_traceback() -> None:
    done = run_command("queuestats", "--database", "nosuchdb")
    assert_one_line_error(done, "CommandError: no database alias 'nosuchdb'")


@pytest.fixture
def watching(alias: str, tmp_path: Path) -> Iterator[Any]:
    """``queuestats testapp.Ping --json --watch 0.1`` on ``alias``, its stdout a pipe."""
    proc = subprocess.Popen(
        command_args("queuestats", "testapp.Ping", "--database", alias, "--json", "--watch", "0.1"),
        cwd=ROOT,
        env=command_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    guard = threading.Timer(PATIENCE, proc.kill)  # a hang guard: readline() has no timeout
    guard.start()
    yield proc
    guard.cancel()
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_watch_prints_a_json_document_a_line_until_interrupted(alias: str, watching: Any) -> None:
    Ping.queue.using(alias).push(message="x")
    first = json.loads(watching.stdout.readline())
    Ping.queue.using(alias).push(message="y")
    # Each refresh reads the queue again: wait for one that saw the second push.
    while (document := json.loads(watching.stdout.readline()))["queues"][0]["ready"] < 2:
        assert document["at"] >= first["at"]
    watching.send_signal(signal.SIGINT)
    assert watching.wait(PATIENCE) == 0
    assert "Traceback" not in watching.stderr.read()
