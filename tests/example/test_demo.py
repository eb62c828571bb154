"""The example shop's demo, run as ``make demo`` runs it (a real process, real HTTP handling
through Django's test client, a real database), on a small scale so the suite stays fast."""

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
pytestmark = pytest.mark.slow


def _run_demo(database_url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": database_url}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(
        [sys.executable, "manage.py", "demo", "--orders", "5", "--bulk", "2000"],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture
def demo_pg_url(pg_dsn: str) -> Iterator[str]:
    name = f"dbqueue_demo_{worker_id()}_{os.getpid()}"
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield database_url(pg_dsn, name)
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@pytest.mark.postgresql
def test_demo_on_postgresql_twice(demo_pg_url: str) -> None:
    for _ in range(2):  # the second run must clear the first one's data
        result = _run_demo(demo_pg_url)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "Demo passed." in result.stdout
        assert "PostgreSQL" in result.stdout


@pytest.mark.sqlite
def test_demo_on_sqlite(tmp_path: Path) -> None:
    result = _run_demo(f"sqlite:///{tmp_path / 'shop.sqlite3'}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Demo passed." in result.stdout
    assert "SQLite" in result.stdout
