"""The example shop's commands, run as ``make demo`` and ``make demo-spark`` run them: a real
``manage.py`` process on a database of the test's own."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.pg import database_url, worker_id

EXAMPLE = Path(__file__).resolve().parents[2] / "example_project"


def manage(database: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python manage.py <args>`` in the example project, with ``DATABASE_URL=database``."""
    env = {**os.environ, "DATABASE_URL": database}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def demo_pg_url(pg_dsn: str) -> Iterator[str]:
    """A new, empty database on the test server, as a ``postgresql://`` URL."""
    name = f"dbqueue_demo_{worker_id()}_{os.getpid()}"
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield database_url(pg_dsn, name)
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
