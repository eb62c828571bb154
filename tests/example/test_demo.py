"""The example shop's demo, run as ``make demo`` runs it (a real process, real HTTP handling
through Django's test client, a real database), on a small scale so the suite stays fast."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.example.conftest import manage

pytestmark = pytest.mark.slow


def _run_demo(database_url: str) -> subprocess.CompletedProcess[str]:
    return manage(database_url, "demo", "--orders", "5", "--bulk", "2000")


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


@pytest.mark.sqlite
def test_demo_spark_needs_postgresql(tmp_path: Path) -> None:
    out = tmp_path / "spark"
    result = manage(
        f"sqlite:///{tmp_path / 'shop.sqlite3'}", "demospark", "--rows", "10", "--out", str(out)
    )
    assert result.returncode == 1
    assert "demospark needs PostgreSQL" in result.stderr
    assert not out.exists()
