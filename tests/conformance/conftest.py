"""The ``front`` fixture: every conformance test runs on {core, Django, SQLAlchemy (sync and
asyncio)} x {PostgreSQL, SQLite}."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import psycopg
import pytest
import sqlalchemy as sa

from tests.conformance.fronts import AsyncSAFront, CoreFront, DjangoFront, Front, SAFront

_DJANGO_DB = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])
_PG, _SQLITE = pytest.mark.postgresql, pytest.mark.sqlite

FRONTS = [
    pytest.param(("core", "postgresql"), id="core-pg", marks=_PG),
    pytest.param(("core", "sqlite"), id="core-sqlite", marks=_SQLITE),
    pytest.param(
        ("django", "postgresql"), id="django-pg", marks=[_PG, pytest.mark.django, _DJANGO_DB]
    ),
    pytest.param(
        ("django", "sqlite"), id="django-sqlite", marks=[_SQLITE, pytest.mark.django, _DJANGO_DB]
    ),
    pytest.param(("sa", "postgresql"), id="sa-pg", marks=[_PG, pytest.mark.sqlalchemy]),
    pytest.param(("sa", "sqlite"), id="sa-sqlite", marks=[_SQLITE, pytest.mark.sqlalchemy]),
    pytest.param(("sa-async", "postgresql"), id="sa-async-pg", marks=[_PG, pytest.mark.sqlalchemy]),
    pytest.param(
        ("sa-async", "sqlite"), id="sa-async-sqlite", marks=[_SQLITE, pytest.mark.sqlalchemy]
    ),
]


@pytest.fixture(params=FRONTS)
def front(request: pytest.FixtureRequest) -> Iterator[Front]:
    yield from _front(request, kept=False)


@pytest.fixture(params=FRONTS)
def kept_front(request: pytest.FixtureRequest) -> Iterator[Front]:
    """A front whose queue has ``keep_done`` (KeptJob, or the core spec with KEPT_OPTIONS)."""
    yield from _front(request, kept=True)


def _front(request: pytest.FixtureRequest, *, kept: bool) -> Iterator[Front]:
    kind, backend = request.param
    if kind == "django":
        request.getfixturevalue("transactional_db")
        yield DjangoFront(backend, "default" if backend == "postgresql" else "sqlite", kept=kept)
    elif kind in ("sa", "sa-async"):
        front_class = AsyncSAFront if kind == "sa-async" else SAFront
        yield from _sa_front(request, backend, front_class, kept=kept)
    else:
        yield from _core_front(request, backend, kept=kept)


def _core_front(request: pytest.FixtureRequest, backend: str, *, kept: bool) -> Iterator[Front]:
    conn: Any
    if backend == "postgresql":
        conn = psycopg.connect(request.getfixturevalue("pg_dsn"), autocommit=True)
    else:
        from dbqueue.drivers.sqlite import connect

        conn = connect(request.getfixturevalue("sqlite_path"))
    front = CoreFront(backend, conn, request.getfixturevalue("table_name"), kept=kept)
    yield front
    if backend == "postgresql":
        conn.execute(f'DROP TABLE "{front.data_table}", "{front.meta_table}"')
    conn.close()


def _sa_front(
    request: pytest.FixtureRequest, backend: str, front_class: type[SAFront], *, kept: bool
) -> Iterator[Front]:
    """Job's (KeptJob's) tables by ``metadata.create_all``: on PostgreSQL in this worker's
    database (their names are fixed, so created and dropped around each test), on SQLite in the
    test's file (in WAL mode, as the core's connections set it, so readers do not block the
    writer)."""
    from tests.sqlalchemy.conftest import sync_url
    from tests.sqlalchemy.kept import KeptJob
    from tests.sqlalchemy.models import Job

    url = sync_url(backend, request)
    model = KeptJob if kept else Job
    metadata = model.metadata
    tables = [cast(sa.Table, model.__table__), model.__queue_meta__]
    engine = sa.create_engine(url)
    if backend == "sqlite":
        with engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA journal_mode=WAL")
    metadata.drop_all(engine, tables=tables)
    metadata.create_all(engine, tables=tables)
    front = front_class(backend, url, kept=kept)
    try:
        yield front
    finally:
        front.close()
        metadata.drop_all(engine, tables=tables)
        engine.dispose()
