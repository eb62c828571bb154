"""Workers on a ring queue: the ``@handler`` of ``Tick`` run in this process and by real
``manage.py runqueueworker`` processes, whose sweeper (the ring's ``rescue``) pushes a failed
attempt again until the message moves to the failed table; SIGTERM stops them cleanly."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from dbqueue.message import State
from dbqueue_django.handlers import Handler, autodiscover, handlers
from dbqueue_django.worker import build_worker
from tests.django.commands import start_command, wait_for
from tests.django.testapp.models import Ping, Tick

pytestmark = [
    pytest.mark.django,
    pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
]
SYMBOLS = ["A", "B", "BOOM", "C", "D"]


@pytest.fixture
def tick_handler() -> Handler:
    autodiscover()
    return handlers()[(Tick, None)]


def push_ticks(alias: str) -> list[int]:
    return Tick.queue.using(alias).push_many([{"symbol": s, "price": Decimal(1)} for s in SYMBOLS])


def handled(alias: str) -> list[str]:
    """What the handler recorded: one Ping per tick handled successfully."""
    return sorted(p.message.split()[1] for p in Ping.queue.using(alias).items())


def test_a_burst_in_this_process(alias: str, tick_handler: Handler) -> None:
    push_ticks(alias)
    stats = build_worker([tick_handler], database=alias, burst=True).run(handle_signals=False)
    # No back-off (Tick's): the failed attempt leaves the ring due at once, and the burst's
    # next pop, finding the ring empty, pushes it again: both attempts in one burst.
    assert (stats.handled, stats.retried, stats.failed) == (4, 1, 1)
    assert handled(alias) == ["A", "B", "C", "D"]
    assert not Tick.queue.using(alias).items().exists()
    assert not Tick.queue.using(alias).waiting().exists()
    (boom,) = Tick.queue.using(alias).failed()
    assert (boom.symbol, boom.state, boom.attempts) == ("BOOM", State.FAILED, 2)
    assert "ValueError: boom at tick" in (boom.last_error or "")


@pytest.fixture
def worker(alias: str, tmp_path: Path) -> Iterator[Callable[[], subprocess.Popen[bytes]]]:
    """Start ``manage.py runqueueworker testapp.Tick`` on this test's database ``alias``."""
    log = tmp_path / "worker.log"
    procs: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        args = ["testapp.Tick", f"--database={alias}", "--log-level=INFO"]
        proc = start_command("runqueueworker", *args, log=log)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_runqueueworker_processes_a_ring(
    alias: str, worker: Callable[[], subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    push_ticks(alias)
    proc = worker()
    log = tmp_path / "worker.log"
    queue = Tick.queue.using(alias)
    wait_for(lambda: handled(alias) == ["A", "B", "C", "D"], "the good ticks are handled", log)
    # BOOM failed its first attempt; the worker's sweeper pushes it again once its (zero)
    # back-off ends, and the second failure moves it to the failed table.
    wait_for(lambda: queue.failed().exists(), "BOOM reaches the failed table", log)
    (failed,) = queue.failed()
    assert (failed.symbol, failed.attempts) == ("BOOM", 2)
    assert queue.stats()["ready"] + queue.stats()["leased"] + queue.stats()["scheduled"] == 0
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert "4 handled, 1 failed, 1 attempt(s) to retry" in log.read_text()
