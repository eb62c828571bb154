"""The keeper through SQLAlchemy (dbqueue.upkeep.keeper): pops on a Session, or on an
AsyncSession, get a keeper connection of the process's own to the engine's database, opened
from the session's psycopg connection, which goes once the pops stop."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.orm import Session

from dbqueue.drivers.psycopg import KEEPER_NAME
from dbqueue.upkeep import keeper
from tests.sqlalchemy.models import Job

pytestmark = pytest.mark.postgresql


@pytest.fixture
def backend() -> str:
    return "postgresql"


@pytest.fixture
def kept() -> Iterator[None]:
    keeper.enable()
    yield
    keeper.disable()  # as the rest of the suite runs, its connection closed


def wait_until(what: str, ok: Callable[[], bool], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def keeper_sessions(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE application_name = :name AND datname = current_database()"
                ),
                {"name": KEEPER_NAME},
            ).scalar_one()
        )


def test_pops_on_a_session_get_a_keeper(kept: None, engine: sa.Engine) -> None:
    with Session(engine) as session, session.begin():
        Job.queue.push_many(session, [{"name": f"j{i}", "n": i} for i in range(5)])
    with Session(engine) as session, session.begin():
        Job.queue.ack(session, Job.queue.pop_batch(session, 5))
    wait_until("the keeper's connection", lambda: keeper_sessions(engine) == 1)
    wait_until("it went", lambda: keeper_sessions(engine) == 0, keeper.ACTIVE_FOR + 10)


@pytest.mark.anyio
async def test_pops_on_an_async_session_get_a_keeper(
    kept: None, engine: sa.Engine, async_engine: AsyncEngine
) -> None:
    async with AsyncSession(async_engine) as session, session.begin():
        await Job.queue.apush(session, name="a", n=1)
    async with AsyncSession(async_engine) as session, session.begin():
        assert [job.name for job in await Job.queue.apop_batch(session, 5)] == ["a"]
    wait_until("the keeper's connection", lambda: keeper_sessions(engine) == 1)
