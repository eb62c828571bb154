"""The worker's lease thread: it extends the leases of a batch being handled for as long as
the handler runs, whatever the maintenance thread is doing, and touches the health file. (A
killed worker's items coming back: tests/bench/test_lease.py, with a real SIGKILL.)"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from dbqueue import QueueOptions
from dbqueue.worker import Chore, Consumer, Worker
from dbqueue.worker.loop import RESCUE_FLOOR
from dbqueue.worker.maintenance import rescue_interval
from tests.core.test_worker import (
    DATABASES,
    PATIENCE,
    Setup,
    make_setup,
    run_in_thread,
    wait_until,
)

LEASE = timedelta(seconds=1)


@pytest.fixture(params=DATABASES)
def db(request: pytest.FixtureRequest, table_name: str) -> Iterator[Setup]:
    setup = make_setup(request, request.param, table_name, QueueOptions(lease=LEASE))
    yield setup
    setup.ex.close()  # type: ignore[attr-defined]


def lease_until(setup: Setup) -> Any:
    meta = setup.queue.spec.meta_table
    (row,) = setup.ex.execute(f'SELECT lease_until FROM "{meta}"', {})
    return row[0]


def test_a_long_handler_keeps_its_lease_past_several_leases(db: Setup) -> None:
    """The handler runs for several leases while a chore keeps the maintenance thread busy
    the whole time: the lease thread alone keeps extending, so a rescue finds nothing
    expired and the item is handled once, on its first attempt."""
    (item_id,) = db.push(1)
    started, release = threading.Event(), threading.Event()
    attempts: list[int] = []

    def handle(message: Any) -> None:
        attempts.append(message.attempts)
        started.set()
        assert release.wait(PATIENCE)

    def busy_chore() -> str | None:
        release.wait(PATIENCE)
        return None

    chore = Chore("busy", 3600, busy_chore, lambda: None)
    worker = Worker([Consumer(db.binding(), handle)], chores=[chore])
    finish = run_in_thread(worker)
    try:
        assert started.wait(PATIENCE)
        seen = {lease_until(db)}
        wait_until(lambda: bool(seen.add(lease_until(db))) or len(seen) > 4)  # 4 extensions
        rescued = db.queue.rescue(db.ex)  # as another worker's rescue would, now
        assert (rescued.ready, rescued.failed) == (0, 0)
        assert db.queue.stats(db.ex).report()["leased"] == 1
    finally:
        release.set()
        finish()
    assert attempts == [1]
    assert worker.stats.handled == 1 and worker.stats.lost_leases == 0
    assert sum(db.states().values()) == 0, item_id  # acked


def test_the_health_file_is_touched_while_the_worker_runs(db: Setup, tmp_path: Path) -> None:
    health = tmp_path / "run" / "worker.alive"
    health.parent.mkdir()
    worker = Worker([Consumer(db.binding(), lambda m: None)], health_file=health)
    finish = run_in_thread(worker)
    try:
        wait_until(health.exists)
        os.utime(health, (0, 0))  # as if it had not been touched since 1970
        wait_until(lambda: health.stat().st_mtime > 0)  # touched again
    finally:
        finish()


def test_rescue_runs_every_third_of_the_shortest_lease() -> None:
    """Defaults: a 10 s lease is rescued every 3.3 s, a long one every 30 s at most, a very
    short one once a second at most."""

    def rescue_every(*leases: float) -> float:
        consumers = [
            Consumer(_Lease(timedelta(seconds=s)), lambda m: None)  # type: ignore[arg-type]
            for s in leases
        ]
        return Worker(consumers, burst=True).rescue_every

    assert rescue_every(10) == pytest.approx(10 / 3)
    assert rescue_every(60, 15) == 5
    assert rescue_every(600) == 30
    assert rescue_every(1) == RESCUE_FLOOR


def test_a_slow_rescue_is_spaced_to_twenty_times_its_duration() -> None:
    """A 200,000-slot ring's rescue (~0.4 s) every 3.3 s would keep a connection busy an
    eighth of the time: it waits 8 s instead. A quick one keeps the interval."""
    assert rescue_interval(10 / 3, 0.4) == pytest.approx(8.0)
    assert rescue_interval(10 / 3, 0.001) == pytest.approx(10 / 3)


class _Lease:
    """Just enough of a WorkerQueue for the worker's constructor (a burst: no listener)."""

    def __init__(self, lease: timedelta) -> None:
        self.lease = lease
        self.channel = None
