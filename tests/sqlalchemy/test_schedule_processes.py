"""A queue's schedule firing every second, raced for by three ``dbqueue worker`` processes
(PostgreSQL and SQLite): each tick is pushed exactly once, none skipped."""

from __future__ import annotations

import datetime as dt
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.processes import PATIENCE, wait_for
from tests.sqlalchemy.cli_support import start
from tests.sqlalchemy.every_second_app import Beat, BeatBase

MODULE = "tests.sqlalchemy.every_second_app"
WORKERS = 3
#: Ticks to see before the workers stop: a few seconds of racing.
TICKS = 6


@pytest.fixture
def engine(url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(url)
    BeatBase.metadata.drop_all(engine)
    BeatBase.metadata.create_all(engine)
    yield engine
    BeatBase.metadata.drop_all(engine)
    engine.dispose()


def pushed_ticks(engine: sa.Engine) -> list[str]:
    with engine.connect() as connection:
        return list(connection.scalars(sa.select(Beat.__table__.c.tick)))


def test_worker_processes_push_each_tick_of_a_queue_schedule_once(
    engine: sa.Engine, url: str, tmp_path: Path
) -> None:
    logs = [tmp_path / f"worker{i}.log" for i in range(WORKERS)]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for log in logs:
            procs.append(start("worker", "--url", url, MODULE, log=log))
        for log in logs:
            wait_for(lambda log=log: "worker started" in log.read_text(), "a worker starts", log)
        wait_for(lambda: len(pushed_ticks(engine)) >= TICKS, f"{TICKS} ticks are pushed", logs[0])
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc, log in zip(procs, logs, strict=True):
            assert proc.wait(PATIENCE) == 0, log.read_text()
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    ticks = pushed_ticks(engine)
    assert len(ticks) == len(set(ticks)), f"a tick was pushed twice: {sorted(ticks)}"
    seen = sorted(dt.datetime.fromisoformat(t) for t in ticks)
    expected = [seen[0] + dt.timedelta(seconds=i) for i in range(len(seen))]
    assert seen == expected, f"a tick was skipped: {[t.isoformat() for t in seen]}"
    pushers = [log.read_text().count("pushed the tick of") for log in logs]
    assert sum(pushers) == len(ticks)
