"""Fixtures shared by the Django tests."""

import sqlite3
from collections.abc import Callable, Iterator

import psycopg
import pytest
from django.db import connections
from pytest_django.fixtures import Settings

from tests.django.aliases import ALIASES
from tests.django.routing import OneDatabase


@pytest.fixture(params=ALIASES)
def alias(request: pytest.FixtureRequest) -> str:
    """Each database alias in turn (PostgreSQL, SQLite)."""
    return str(request.param)


@pytest.fixture
def routed(alias: str, settings: Settings) -> str:
    """Each alias in turn, with every model routed to it: the admin's pages, its users and
    sessions, and ``Model.queue`` all use that database."""
    settings.DATABASE_ROUTERS = [OneDatabase(alias)]
    return alias


@pytest.fixture
def outside(alias: str) -> Iterator[Callable[[str], int]]:
    """Row counts as another connection sees them (what is committed, not Django's view)."""
    name = connections[alias].settings_dict["NAME"]
    if alias == "default":
        params = connections[alias].get_connection_params()
        keys = ("dbname", "user", "password", "host", "port")
        conn: psycopg.Connection | sqlite3.Connection = psycopg.connect(
            **{k: params[k] for k in keys if params.get(k)}, autocommit=True
        )
    else:
        conn = sqlite3.connect(name, isolation_level=None)

    def count(table: str) -> int:
        return int(conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])

    yield count
    conn.close()
