"""Helpers of the ``dbqueue`` CLI tests: running it as a subprocess, and putting items of the
test queues in each state."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from tests.processes import PATIENCE, ROOT, run_process, start_process
from tests.sqlalchemy.models import Job, Tick

COMMAND = [sys.executable, "-m", "dbqueue_sa.cli"]


def environment() -> dict[str, str]:
    """The test process's environment, with the repository importable and no DBQUEUE_URL."""
    env = {k: v for k, v in os.environ.items() if k != "DBQUEUE_URL"}
    env["PYTHONPATH"] = str(ROOT)
    return env


def dbqueue(
    *args: str, stdin: str = "", timeout: float = PATIENCE
) -> subprocess.CompletedProcess[str]:
    """Run ``dbqueue ARGS`` to completion (stderr is not a terminal: plain progress lines)."""
    return run_process([*COMMAND, *args], environment(), stdin, timeout=timeout)


def start(*args: str, log: Path) -> subprocess.Popen[bytes]:
    """Start ``dbqueue ARGS`` in the background, its stdout and stderr going to ``log``."""
    return start_process([*COMMAND, *args], environment(), log)


def push_jobs(engine: sa.Engine, count: int, prefix: str = "j") -> list[int]:
    with Session(engine) as session, session.begin():
        return Job.queue.push_many(session, [{"name": f"{prefix}{i}"} for i in range(count)])


def push_ticks(engine: sa.Engine, *symbols: str) -> list[int]:
    rows = [{"symbol": s, "price": Decimal("2.5")} for s in symbols]
    with Session(engine) as session, session.begin():
        return Tick.queue.push_many(session, rows)


def fail_jobs(engine: sa.Engine, count: int) -> list[int]:
    """``count`` jobs in the failed state (every attempt failed, without back-off); push
    them before any other job: each attempt pops whatever is first."""
    ids = push_jobs(engine, count, prefix="failing")
    for _ in range(Job.__queue_spec__.options.max_attempts):
        with Session(engine) as session, session.begin():
            items = Job.queue.pop_batch(session, count)
            Job.queue.fail(session, items, "broken", delay=dt.timedelta(0))
    return ids


def fail_ticks(engine: sa.Engine, *symbols: str) -> None:
    """Ticks in the ring's failed table (each attempt failed; the sweeper buries them)."""
    push_ticks(engine, *symbols)
    for _ in range(Tick.__queue_spec__.options.max_attempts):
        with Session(engine) as session, session.begin():
            Tick.queue.fail(session, Tick.queue.pop_batch(session, len(symbols)), "broken")
        with Session(engine) as session, session.begin():
            Tick.queue.rescue(session)


def stats(engine: sa.Engine, model: Any) -> dict[str, Any]:
    with Session(engine) as session:
        return model.queue.stats(session)  # type: ignore[no-any-return]
