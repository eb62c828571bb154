"""The ``front`` fixture: every conformance test runs on {core, Django} x {PostgreSQL, SQLite}."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from tests.conformance.fronts import CoreFront, DjangoFront, Front

_DJANGO_DB = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])

FRONTS = [
    pytest.param(("core", "postgresql"), id="core-pg", marks=pytest.mark.postgresql),
    pytest.param(("core", "sqlite"), id="core-sqlite", marks=pytest.mark.sqlite),
    pytest.param(
        ("django", "postgresql"),
        id="django-pg",
        marks=[pytest.mark.postgresql, pytest.mark.django, _DJANGO_DB],
    ),
    pytest.param(
        ("django", "sqlite"),
        id="django-sqlite",
        marks=[pytest.mark.sqlite, pytest.mark.django, _DJANGO_DB],
    ),
]


@pytest.fixture(params=FRONTS)
def front(request: pytest.FixtureRequest, table_name: str) -> Iterator[Front]:
    kind, backend = request.param
    if kind == "django":
        request.getfixturevalue("transactional_db")
        yield DjangoFront(backend, "default" if backend == "postgresql" else "sqlite")
        return
    if backend == "postgresql":
        conn = psycopg.connect(request.getfixturevalue("pg_dsn"), autocommit=True)
    else:
        from dbqueue.drivers.sqlite import connect

        conn = connect(request.getfixturevalue("sqlite_path"))
    front = CoreFront(backend, conn, table_name)
    yield front
    if backend == "postgresql":
        conn.execute(f'DROP TABLE "{front.data_table}", "{front.meta_table}"')
    conn.close()
