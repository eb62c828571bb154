"""``dbqueue worker`` in a real process whose database goes away (a proxy in front of
PostgreSQL, killed) while six slow items are in hand: ``--burst`` exits 1 once
``--reconnect-for`` has passed, saying so once; a worker without it exits 1 at the first
SIGTERM. Either way the items stay leased, for their leases to bring them back."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy.orm import Session

from tests.pg import database_url
from tests.processes import PATIENCE, wait_for
from tests.proxy import TcpProxy
from tests.sqlalchemy.cli_support import start, stats
from tests.sqlalchemy.models import Job

pytestmark = [pytest.mark.sqlalchemy, pytest.mark.postgresql]


@pytest.fixture
def backend() -> str:
    """PostgreSQL only (the ``engine`` fixture's database): the proxy is a TCP one."""
    return "postgresql"


@pytest.fixture
def proxied_url(pg_dsn: str) -> Iterator[tuple[TcpProxy, str]]:
    """A proxy to the test server, and the URL of the test database through it."""
    with TcpProxy.to_dsn(pg_dsn) as proxy:
        url = database_url(proxy.dsn(pg_dsn), str(conninfo_to_dict(pg_dsn)["dbname"]))
        yield proxy, url.replace("postgresql://", "postgresql+psycopg://", 1)


def met_the_outage(text: str) -> bool:
    """Whether a queue's operation failed in the log ``text``: the worker knows its database
    is away (a heartbeat's failure, say, is not a queue's)."""
    return re.search(r"queue \S+: (upkeep|rescue|lease extension) failed \(", text) is not None


@pytest.mark.parametrize("mode", ["burst", "sigterm"])
def test_the_worker_ends_when_the_database_goes_away_under_its_items(
    proxied_url: tuple[TcpProxy, str], engine: sa.Engine, tmp_path: Path, mode: str
) -> None:
    proxy, url = proxied_url
    with Session(engine) as session, session.begin():
        Job.queue.push_many(session, [{"name": "sleep 0.5"} for _ in range(6)])
    log = tmp_path / "worker.log"
    args = ["worker", "--url", url, "tests.sqlalchemy.slow_app", "--queue", "sa_job"]
    if mode == "burst":
        args += ["--burst", "--reconnect-for", "1"]
    worker = start(*args, log=log)
    try:
        wait_for(lambda: stats(engine, Job)["leased"] == 6, "the worker holds six items", log)
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
    assert text.strip().splitlines()[-1].startswith("dbqueue worker: error: queue sa_job: ")
    assert "Traceback" not in text
    for failure in ("upkeep failed", "lease extension failed", "rescue failed"):
        assert text.count(failure) <= 1, text  # once per cause in 30 s
    assert stats(engine, Job)["leased"] == 6  # not acked nor released: leases bring them back
