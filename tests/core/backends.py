"""The two databases core tests run a queue on, and a connection to either: what the tests of
one queue layout on PostgreSQL and SQLite share (the ring's have tests/core/ringbed.py)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

#: Parameters of a fixture that runs a test on each database, marked for selection.
BACKENDS = [
    pytest.param("postgresql", marks=pytest.mark.postgresql, id="pg"),
    pytest.param("sqlite", marks=pytest.mark.sqlite, id="sqlite"),
]


def connect(request: pytest.FixtureRequest, backend: str) -> Any:
    """A connection to the test's database of ``backend``: PostgreSQL in autocommit (this
    worker's core database), SQLite through dbqueue's driver (a file of the test's own)."""
    if backend == "postgresql":
        return psycopg.connect(request.getfixturevalue("pg_dsn"), autocommit=True)
    from dbqueue.drivers.sqlite import connect as sqlite_connect

    return sqlite_connect(request.getfixturevalue("sqlite_path"))
