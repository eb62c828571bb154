"""The example shop's commands, run as ``make demo`` and ``make demo-spark`` run them: a real
``manage.py`` process on a database of the test's own."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import pytest
from psycopg import sql

from tests.pg import database_url, worker_id

if TYPE_CHECKING:
    from tests.example.deploy_guide import Machine
from tests.processes import run_process

EXAMPLE = Path(__file__).resolve().parents[2] / "example_project"


def manage(database: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python manage.py <args>`` in the example project, with ``DATABASE_URL=database``."""
    env = {**os.environ, "DATABASE_URL": database}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return run_process([sys.executable, "manage.py", *args], env, cwd=EXAMPLE, timeout=timeout)


@contextmanager
def scratch_pg_database(pg_dsn: str, prefix: str) -> Iterator[str]:
    """A new, empty database on the test server for one test, as a ``postgresql://`` URL."""
    name = f"{prefix}_{worker_id()}_{os.getpid()}"
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield database_url(pg_dsn, name)
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@pytest.fixture
def demo_pg_url(pg_dsn: str) -> Iterator[str]:
    """A new, empty database on the test server, as a ``postgresql://`` URL."""
    with scratch_pg_database(pg_dsn, "dbqueue_demo") as url:
        yield url


@pytest.fixture(
    params=[
        pytest.param("postgresql", id="pg", marks=pytest.mark.postgresql),
        pytest.param("sqlite", id="sqlite", marks=pytest.mark.sqlite),
    ]
)
def shop_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database of an example shop's own (the FastAPI and Flask examples): a fresh
    PostgreSQL database, or a SQLite file; a SQLAlchemy URL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'shop.sqlite3'}"
        return
    with scratch_pg_database(request.getfixturevalue("pg_dsn"), "dbqueue_shop") as url:
        yield url.replace("postgresql://", "postgresql+psycopg://", 1)


def dbqueue_worker(url: str, module: str) -> subprocess.CompletedProcess[str]:
    """``dbqueue worker --url URL MODULE --burst``, with ``DATABASE_URL=url`` for the handlers'
    own sessions, as an example's README runs it."""
    env = {**os.environ, "DATABASE_URL": url}
    command = [sys.executable, "-m", "dbqueue_sa.cli", "worker", "--url", url, module, "--burst"]
    return run_process(command, env, cwd=EXAMPLE.parent, timeout=120)


@pytest.fixture(scope="module")
def shop_dsn(pg_dsn: str) -> Iterator[str]:
    """A database of the module's own with the example shop's tables (``manage.py migrate``),
    for the deployment guide's tests."""
    from tests.example.deploy_guide import PAGE_ENV, Machine, run_to_end

    with scratch_pg_database(pg_dsn, "dbqueue_deploy") as url:
        migrate = ["python", "manage.py", "migrate", "--verbosity", "0"]
        run_to_end(Machine(url, 0).command(migrate, PAGE_ENV))
        yield url


@pytest.fixture
def machine(shop_dsn: str) -> Machine:
    """The deployment guide's placeholders on this machine: the shop's database, a free port."""
    from bench.loadtest.shop import free_port
    from tests.example.deploy_guide import Machine

    return Machine(shop_dsn, free_port())
