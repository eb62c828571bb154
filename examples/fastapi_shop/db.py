"""Engines and sessions, sync and asyncio, for the database named by ``DATABASE_URL``.

``DATABASE_URL`` is a SQLAlchemy URL: ``postgresql+psycopg://user:password@host/shop`` or a
SQLite file, ``sqlite:///shop.sqlite3`` (the default, in the current directory). The asyncio
engine uses the same database through psycopg's async mode or aiosqlite.

``python -m examples.fastapi_shop.db`` creates the tables (``Base.metadata.create_all``).
"""

from __future__ import annotations

import os
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine
from sqlalchemy.orm import sessionmaker

DEFAULT_URL = "sqlite:///shop.sqlite3"

#: Sessions of the configured database (see :func:`use`): ``with SessionLocal.begin() as s:``.
SessionLocal = sessionmaker()
#: AsyncSessions of the configured database. Objects stay readable after the commit.
AsyncSessionLocal = async_sessionmaker(expire_on_commit=False)


def sync_url(url: str | sa.URL) -> sa.URL:
    """``url`` with a driver named: psycopg 3 for a bare ``postgresql://``."""
    parsed = sa.make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def async_url(url: str | sa.URL) -> sa.URL:
    """The asyncio driver's URL for the same database (psycopg serves both; aiosqlite)."""
    parsed = sync_url(url)
    if parsed.get_backend_name() == "sqlite":
        parsed = parsed.set(drivername="sqlite+aiosqlite")
    return parsed


def _sqlite_wal(dbapi_connection: Any, connection_record: Any) -> None:
    # WAL lets readers go on while one connection writes. Writers still take turns: a queue
    # operation starts with BEGIN IMMEDIATE, and waits for the lock up to the driver's timeout.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.close()


class Database:
    """The sync and asyncio engines of one database."""

    def __init__(self, url: str | sa.URL) -> None:
        self.url = sync_url(url)
        self.engine = sa.create_engine(self.url)
        self.async_engine: AsyncEngine = create_async_engine(async_url(url))
        if self.url.get_backend_name() == "sqlite":
            sa.event.listen(self.engine, "connect", _sqlite_wal)
            sa.event.listen(self.async_engine.sync_engine, "connect", _sqlite_wal)

    def create_tables(self) -> None:
        """Every table of the shop, the queues' included (in a real project: Alembic)."""
        from examples.fastapi_shop.models import Base

        Base.metadata.create_all(self.engine)

    def dispose(self) -> None:
        """Close the sync engine's connections (the app's lifespan closes the asyncio ones, on
        the event loop that opened them)."""
        self.engine.dispose()


def use(url: str | sa.URL) -> Database:
    """Point ``SessionLocal`` and ``AsyncSessionLocal`` at the database ``url``."""
    global database
    database = Database(url)
    SessionLocal.configure(bind=database.engine)
    AsyncSessionLocal.configure(bind=database.async_engine)
    return database


#: The database in use (``DATABASE_URL``'s, until :func:`use` names another).
database = use(os.environ.get("DATABASE_URL", DEFAULT_URL))


if __name__ == "__main__":
    database.create_tables()
    print(f"created the shop's tables in {database.url.render_as_string()}")
