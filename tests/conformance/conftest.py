"""The ``front`` fixture: every conformance test runs on {core, Django, SQLAlchemy (sync and
asyncio; asyncpg too on PostgreSQL)} x {PostgreSQL, SQLite} x {split queue, ring};
``split_front`` and ``kept_front`` on the split queue only, for what only it does."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from dbqueue import get_dialect
from dbqueue.schema import drop_ring_statements, drop_statements
from tests.conformance.fronts import (
    AsyncpgSAFront,
    AsyncSAFront,
    CoreFront,
    DjangoFront,
    Front,
    SAFront,
    sa_model,
)

# Each Django front flushes only the database it uses after each test (0.1 s to 0.3 s each).
_DJANGO_PG = pytest.mark.django_db(transaction=True, databases=["default"])
_DJANGO_SQLITE = pytest.mark.django_db(transaction=True, databases=["sqlite"])
_PG, _SQLITE = pytest.mark.postgresql, pytest.mark.sqlite

_FRONT_KINDS = [
    ("core", "postgresql", "core-pg", [_PG]),
    ("core", "sqlite", "core-sqlite", [_SQLITE]),
    ("django", "postgresql", "django-pg", [_PG, pytest.mark.django, _DJANGO_PG]),
    ("django", "sqlite", "django-sqlite", [_SQLITE, pytest.mark.django, _DJANGO_SQLITE]),
    ("sa", "postgresql", "sa-pg", [_PG, pytest.mark.sqlalchemy]),
    ("sa", "sqlite", "sa-sqlite", [_SQLITE, pytest.mark.sqlalchemy]),
    ("sa-async", "postgresql", "sa-async-pg", [_PG, pytest.mark.sqlalchemy]),
    ("sa-async", "sqlite", "sa-async-sqlite", [_SQLITE, pytest.mark.sqlalchemy]),
    ("sa-asyncpg", "postgresql", "sa-asyncpg-pg", [_PG, pytest.mark.sqlalchemy]),
]


def _fronts(layouts: tuple[str, ...]) -> list[Any]:
    """Every front end x database, for each layout (the split queue's ids stay as they were;
    the ring's end in ``-ring``)."""
    return [
        pytest.param(
            (kind, backend, layout), id=ident + ("-ring" if layout == "ring" else ""), marks=marks
        )
        for layout in layouts
        for kind, backend, ident, marks in _FRONT_KINDS
    ]


#: Both layouts: what a split queue and a ring do alike (where they differ by design, a
#: capability of Front says so and the test asserts each side).
FRONTS = _fronts(("split", "ring"))
#: The split queue's own: priorities, delays, keep_done.
SPLIT_FRONTS = _fronts(("split",))
#: The ring's own: no priorities nor delays, a fixed capacity.
RING_FRONTS = _fronts(("ring",))


@pytest.fixture(params=FRONTS)
def front(request: pytest.FixtureRequest) -> Iterator[Front]:
    yield from _front(request, kept=False)


@pytest.fixture(params=SPLIT_FRONTS)
def split_front(request: pytest.FixtureRequest) -> Iterator[Front]:
    """A split queue: for what only it does (priorities, delays, set_priority)."""
    yield from _front(request, kept=False)


@pytest.fixture(params=RING_FRONTS)
def ring_front(request: pytest.FixtureRequest) -> Iterator[Front]:
    """A ring: for what only it does."""
    yield from _front(request, kept=False)


@pytest.fixture(params=SPLIT_FRONTS)
def kept_front(request: pytest.FixtureRequest) -> Iterator[Front]:
    """A front whose queue has ``keep_done`` (KeptJob, or the core spec with KEPT_OPTIONS)."""
    yield from _front(request, kept=True)


SA_FRONTS: dict[str, type[SAFront]] = {
    "sa": SAFront,
    "sa-async": AsyncSAFront,
    "sa-asyncpg": AsyncpgSAFront,
}


def _front(request: pytest.FixtureRequest, *, kept: bool) -> Iterator[Front]:
    kind, backend, layout = request.param
    if kind == "django":
        request.getfixturevalue("transactional_db")
        alias = "default" if backend == "postgresql" else "sqlite"
        yield DjangoFront(backend, alias, kept=kept, layout=layout)
    elif kind in SA_FRONTS:
        front_class = SA_FRONTS[kind]
        yield from _sa_front(request, backend, front_class, kept=kept, layout=layout)
    else:
        yield from _core_front(request, backend, kept=kept, layout=layout)


def _core_front(
    request: pytest.FixtureRequest, backend: str, *, kept: bool, layout: str
) -> Iterator[Front]:
    conn: Any
    if backend == "postgresql":
        conn = psycopg.connect(request.getfixturevalue("pg_dsn"), autocommit=True)
    else:
        from dbqueue.drivers.sqlite import connect

        conn = connect(request.getfixturevalue("sqlite_path"))
    table = request.getfixturevalue("table_name")
    front = CoreFront(backend, conn, table, kept=kept, layout=layout)
    yield front
    if backend == "postgresql":
        drop = drop_ring_statements if layout == "ring" else drop_statements
        for statement in drop(front.spec, get_dialect(backend)):
            conn.execute(statement)
    conn.close()


def _sa_front(
    request: pytest.FixtureRequest,
    backend: str,
    front_class: type[SAFront],
    *,
    kept: bool,
    layout: str,
) -> Iterator[Front]:
    """Job's (KeptJob's) tables by ``metadata.create_all``: on PostgreSQL in this worker's
    database (their names are fixed, so created and dropped around each test), on SQLite in the
    test's file (in WAL mode, as the core's connections set it, so readers do not block the
    writer)."""
    from dbqueue_sa.mixins import own_tables
    from tests.sqlalchemy.conftest import sync_url

    url = sync_url(backend, request)
    model = sa_model(kept=kept, layout=layout)
    metadata = model.metadata
    tables = own_tables(model)  # data and meta and head, or slots and failed
    engine = sa.create_engine(url)
    if backend == "sqlite":
        with engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA journal_mode=WAL")
    metadata.drop_all(engine, tables=tables)
    metadata.create_all(engine, tables=tables)
    front = front_class(backend, url, kept=kept, layout=layout)
    try:
        yield front
    finally:
        front.close()
        metadata.drop_all(engine, tables=tables)
        engine.dispose()
