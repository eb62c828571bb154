"""``manage.py runqueueworker`` in a real process whose database goes away (a proxy in front
of PostgreSQL, killed) while six slow items are in hand: ``--burst`` exits 1 once
``--reconnect-for`` has passed, saying so once; a worker without it exits 1 at the first
SIGTERM. Either way the items stay leased, for their leases to bring back."""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connections

from tests.django.commands import PATIENCE, command_env, start_command, wait_for
from tests.django.testapp.models import Ping
from tests.proxy import TcpProxy

pytestmark = [
    pytest.mark.django,
    pytest.mark.postgresql,
    pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
]


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    """A proxy to the server of the ``default`` database."""
    settings = connections["default"].settings_dict
    with TcpProxy.to_server(settings["HOST"], settings["PORT"]) as proxy:
        yield proxy


def leased() -> int:
    return int(Ping.queue.stats()["leased"])


def met_the_outage(text: str) -> bool:
    """Whether a queue's operation failed in the log ``text``: the worker knows its database
    is away (a heartbeat's failure, say, is not a queue's)."""
    return re.search(r"queue \S+: (upkeep|rescue|lease extension) failed \(", text) is not None


@pytest.mark.parametrize("mode", ["burst", "sigterm"])
def test_runqueueworker_ends_when_the_database_goes_away_under_its_items(
    proxy: TcpProxy, tmp_path: Path, mode: str
) -> None:
    Ping.queue.push_many([{"message": "sleep 0.5"} for _ in range(6)])
    env = {
        **command_env(),
        "DBQUEUE_WORKER_SERVERS": json.dumps({"default": ["127.0.0.1", proxy.port]}),
    }
    log = tmp_path / "worker.log"
    args = ["runqueueworker", "testapp.Ping"]
    if mode == "burst":
        args += ["--burst", "--reconnect-for", "1"]
    worker = start_command(*args, log=log, env=env)
    try:
        wait_for(lambda: leased() == 6, "the worker holds the six items", log)
        proxy.kill()
        if mode == "sigterm":
            wait_for(lambda: met_the_outage(log.read_text()), "the worker meets the outage", log)
            worker.send_signal(signal.SIGTERM)
        status = worker.wait(PATIENCE)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    text = log.read_text()
    assert status == 1, text
    said = "the database stayed unreachable for" if mode == "burst" else "SIGTERM while the"
    assert text.count(said) == 2, text  # the log line, and the command's one-line error
    assert text.strip().splitlines()[-1].startswith("CommandError: queue testapp.Ping@default")
    assert "Traceback" not in text
    for failure in ("upkeep failed", "lease extension failed", "rescue failed"):
        assert text.count(failure) <= 1, text  # once per cause in 30 s
    assert leased() == 6  # neither acked nor released: their leases bring them back
