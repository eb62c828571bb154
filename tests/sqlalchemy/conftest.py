"""Engines for the SQLAlchemy tests: real PostgreSQL (this xdist worker's database on the
shared server) and real SQLite files, sync and asyncio. Never mocked."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from tests.pg import database_url
from tests.sqlalchemy.handled_log import LOG_VARIABLE
from tests.sqlalchemy.models import Base

pytestmark = pytest.mark.sqlalchemy

BACKENDS = [
    pytest.param("postgresql", id="pg", marks=pytest.mark.postgresql),
    pytest.param("sqlite", id="sqlite", marks=pytest.mark.sqlite),
]


def sync_url(backend: str, request: pytest.FixtureRequest, database: str = "pg_dsn") -> str:
    """A SQLAlchemy URL for ``backend``: the worker's PostgreSQL database (the DSN fixture
    ``database``), or a SQLite file."""
    if backend == "postgresql":
        dsn: str = request.getfixturevalue(database)
        from psycopg.conninfo import conninfo_to_dict

        url = database_url(dsn, str(conninfo_to_dict(dsn)["dbname"]))
        return url.replace("postgresql://", "postgresql+psycopg://", 1)
    return f"sqlite+pysqlite:///{request.getfixturevalue('sqlite_path')}"


def async_url(url: str) -> str:
    """The asyncio driver's URL for a sync one (psycopg async, aiosqlite)."""
    return url.replace("sqlite+pysqlite://", "sqlite+aiosqlite://", 1)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def url(backend: str, request: pytest.FixtureRequest) -> str:
    return sync_url(backend, request)


@pytest.fixture
def empty_url(backend: str, request: pytest.FixtureRequest) -> str:
    """The backend's URL; on PostgreSQL a database no other test leaves tables in: Alembic's
    autogenerate compares the whole database with the metadata."""
    return sync_url(backend, request, "empty_pg_dsn")


@pytest.fixture
def engine(url: str) -> Iterator[sa.Engine]:
    """An engine with every test queue's tables created (dropped afterwards)."""
    engine = sa.create_engine(url)
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    yield engine
    Base.metadata.drop_all(engine)
    engine.dispose()


@pytest.fixture
async def async_engine(engine: sa.Engine, url: str) -> AsyncIterator[AsyncEngine]:
    """The same database through the asyncio driver (tables already created)."""
    aengine = create_async_engine(async_url(url))
    yield aengine
    await aengine.dispose()


@pytest.fixture
def anyio_backend() -> str:
    """Async tests (``@pytest.mark.anyio``) run on asyncio: psycopg's and aiosqlite's loop."""
    return "asyncio"


@pytest.fixture
def handled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file the handlers of a worker subprocess append ``<group> <value>`` to
    (tests.sqlalchemy.handled_log)."""
    log = tmp_path / "handled.log"
    monkeypatch.setenv(LOG_VARIABLE, str(log))
    return log
