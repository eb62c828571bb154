"""dbqueue_sa.psycopg_async: the core's statements read through SQLAlchemy's asyncio psycopg
adapter row by row when one row cannot be loaded (the conformance suite's unreadable-rows
tests run the queue through it), while every other statement on the same engine is left to
the adapter as it was."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DataError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from dbqueue_sa.executor import SAExecutor
from dbqueue_sa.psycopg_async import CORE_ROWS
from tests.sqlalchemy.conftest import sync_url

pytestmark = [pytest.mark.sqlalchemy, pytest.mark.postgresql, pytest.mark.anyio]

#: One readable row and one PostgreSQL's 'infinity' Python's datetime cannot hold.
ROWS = "SELECT n, t FROM (VALUES (1, now()), (2, 'infinity'::timestamptz)) AS v(n, t)"


@pytest.fixture
async def conn(request: pytest.FixtureRequest) -> AsyncIterator[AsyncConnection]:
    engine: AsyncEngine = create_async_engine(sync_url("postgresql", request))
    async with engine.connect() as connection:
        yield connection
    await engine.dispose()


async def test_a_core_statement_fails_only_the_row_it_cannot_load(conn: AsyncConnection) -> None:
    rows = await conn.run_sync(lambda c: SAExecutor(c).execute(ROWS, {}))
    assert [r[0] for r in rows] == [1, 2]
    assert rows[0][1] is not None
    assert rows[1][1] is None and "infinity" in " ".join(getattr(rows[1], "errors", []))
    # The connection goes on working, in the same transaction.
    assert (await conn.execute(sa.text("SELECT 1"))).scalar() == 1


async def test_other_statements_are_the_adapters_own(conn: AsyncConnection) -> None:
    """A user's query on the same engine raises as it always did: the listener acts only on
    statements run with the core's execution option."""
    with pytest.raises(DataError, match="infinity"):
        await conn.execute(sa.text(ROWS))
    await conn.rollback()
    result = await conn.execute(sa.text("SELECT 1 AS one"))
    assert [dict(m) for m in result.mappings()] == [{"one": 1}]
    assert CORE_ROWS not in conn.sync_connection.get_execution_options()  # type: ignore[union-attr]
