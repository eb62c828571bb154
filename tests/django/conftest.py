"""Fixtures shared by the Django tests."""

import sqlite3
from collections.abc import Callable, Iterator

import psycopg
import pytest
from django.db import connections
from pytest_django.fixtures import Settings

from tests.django.aliases import ALIASES
from tests.django.routing import OneDatabase


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test run on one alias (the ``alias`` fixture's) flushes only that database after it,
    unless marked ``both_databases``: the other one's flush cost each test 0.05 to 0.3 s."""
    for item in items:
        params = getattr(item, "callspec", None)
        alias = params.params.get("alias") if params is not None else None
        marker = item.get_closest_marker("django_db")
        if (
            not isinstance(alias, str)
            or marker is None
            or item.get_closest_marker("both_databases")
        ):
            continue
        databases = marker.kwargs.get("databases")
        if isinstance(databases, list | tuple) and alias in databases and len(databases) > 1:
            only = pytest.mark.django_db(*marker.args, **{**marker.kwargs, "databases": [alias]})
            item.add_marker(only, append=False)


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
