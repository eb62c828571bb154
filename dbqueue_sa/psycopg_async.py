"""SQLAlchemy's asyncio psycopg adapter, made to read the core's rows as the core does.

The adapter (``postgresql+psycopg://`` under ``create_async_engine``) fetches every row inside
its execute, and one value psycopg cannot load ('infinity' in a timestamp, written by SQL
outside dbqueue) fails the whole fetch: a pop would raise after leasing its batch, and raise
again at every try. For the core's statements only (run with the execution option
:data:`CORE_ROWS`), a ``do_execute`` listener runs the statement on the adapter's psycopg
cursor itself and fetches with :func:`dbqueue.drivers.psycopg.afetch_rows`, which fails the
unreadable row alone; the executor then takes those rows from the adapter (:func:`rows_of`)
before SQLAlchemy makes Row objects of them. The transaction, the wrapping of errors, the
invalidation of a lost connection and the logging stay SQLAlchemy's.

It reads two attributes of the adapter's cursor (``_cursor``, its psycopg cursor, and
``_rows``, what the adapter fetched), as the adapter's own execute does; the asyncio
conformance front runs it on SQLAlchemy 2.0 and 2.1.
"""

from __future__ import annotations

import collections
from typing import Any

from psycopg import pq
from sqlalchemy import event
from sqlalchemy.dialects.postgresql.psycopg import PGDialectAsync_psycopg
from sqlalchemy.util.concurrency import await_only

from dbqueue.drivers.psycopg import afetch_rows
from dbqueue.executor import Row

#: The execution option that marks a core statement (see the module docstring).
CORE_ROWS = "dbqueue_core_rows"


@event.listens_for(PGDialectAsync_psycopg, "do_execute")
def _execute(cursor: Any, statement: str, parameters: Any, context: Any) -> bool:
    """Run a core statement and fetch its rows one by one if one fails; False leaves any
    other statement to the adapter."""
    if not context.execution_options.get(CORE_ROWS):
        return False
    raw = cursor._cursor
    await_only(raw.execute(statement, parameters))
    result = raw.pgresult
    if result is not None and result.status == pq.ExecStatus.TUPLES_OK:
        cursor._rows = collections.deque(await_only(afetch_rows(raw)))
    return True


def rows_of(cursor: Any) -> list[Row]:
    """The rows :func:`_execute` fetched into the adapter's cursor ``cursor``."""
    return list(cursor._rows)
