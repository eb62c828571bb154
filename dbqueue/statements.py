"""A queue's named statements (``sql/<dialect>/<layout>.sql``), rendered once, and how they
run: the database's errors told in the queue's terms, rows read by name, the commits that need
not wait for their WAL flush, the client clock where the database has none, and wake-ups."""

from __future__ import annotations

import datetime as dt
import logging
import time
from typing import Any

from dbqueue.dialects.base import Dialect
from dbqueue.errors import DBQueueError, QueueTableMissing, SnapshotTooOld
from dbqueue.executor import Executor, Row
from dbqueue.outage import is_outage, sqlstate, unavailable
from dbqueue.rows import NumberRow
from dbqueue.spec import QueueSpec
from dbqueue.sql import Statement, render

log = logging.getLogger(__name__)

#: The SQLSTATE of a serialization failure: a REPEATABLE READ or SERIALIZABLE transaction
#: tried to change a row changed after its snapshot was taken.
SERIALIZATION_FAILURE = "40001"
#: How many times a statement run outside a transaction is run again after a serialization
#: failure (see ``Statements._run``).
CONFLICT_RETRIES = 3
#: What marks a statement that takes the ``commit`` parameter (see ``_relaxed`` in
#: sql/postgresql/common.sql and :attr:`~dbqueue.spec.QueueOptions.durable_acks`).
RELAXED = "set_config('synchronous_commit'"


class Statements:
    """The statements of one queue's layout on one dialect. Thread-safe: no connection."""

    #: The layout's name: its SQL file, and the prefix of its statements' names.
    layout = ""

    def __init__(self, spec: QueueSpec, dialect: Dialect) -> None:
        self.spec = spec
        self.dialect = dialect
        self.statements = render(spec, dialect, self.layout)
        #: The statements that may commit without waiting for their WAL flush (they hold the
        #: ``_relaxed`` fragment: PostgreSQL's at-least-once pops and acks).
        self._relaxable = frozenset(
            name for name, st in self.statements.items() if any(RELAXED in p for p in st.parts)
        )
        self._relax = None if spec.options.durable_acks else "off"
        interval = spec.options.notify_interval
        self._notify_every = (
            interval.total_seconds()
            if interval is not None and dialect.supports_listen_notify
            else None
        )
        self._last_notify = -float("inf")

    def _params(self) -> dict[str, Any]:
        """Parameters every statement of the layout may use (none for the split layout)."""
        return {}

    def _statement(self, operation: str) -> Statement:
        """The layout's statement for ``operation``: ``<layout>_<operation>``."""
        return self.statements[f"{self.layout}_{operation}"]

    def _run(self, ex: Executor, operation: str, params: dict[str, Any]) -> list[Row]:
        """Run the layout's statement for ``operation`` (see :meth:`_statement`).

        Outside a transaction, a statement that met a serialization failure (REPEATABLE READ
        made the connection's default by a role or a driver option: a row it would change was
        changed since its snapshot, where READ COMMITTED would have read it again) rolled back
        whole and is run again, up to ``CONFLICT_RETRIES`` times, each with a new snapshot;
        inside the caller's transaction only the caller can start a new one
        (:class:`~dbqueue.SnapshotTooOld`)."""
        for _ in range(CONFLICT_RETRIES):
            try:
                return self._run_once(ex, operation, params)
            except Exception as exc:
                if ex.in_transaction() or sqlstate(exc) != SERIALIZATION_FAILURE:
                    raise
        return self._run_once(ex, operation, params)

    def _run_once(self, ex: Executor, operation: str, params: dict[str, Any]) -> list[Row]:
        stmt = self._statement(operation)
        params = {**self._params(), **params}
        # A write is known not stored if the statement was never sent, or ran in a transaction
        # (read before: once a connection breaks, the driver cannot tell any more).
        not_stored = True
        try:
            not_stored = ex.in_transaction()
            if stmt.name in self._relaxable:
                # Only a statement that is its own transaction: the caller's stays as it is.
                params["commit"] = None if not_stored else self._relax
            if len(stmt.parts) == 1:
                return ex.execute(stmt.parts[0], params)
            with ex.atomic():
                return self._run_block(ex, stmt, params)
        except Exception as exc:
            told = self._told(exc, operation, not_stored)
            if told is exc:
                raise
            raise told from exc

    def _run_outside(self, ex: Executor, operation: str, params: dict[str, Any]) -> list[Row]:
        """Run the statements of ``operation`` one after the other, each its own transaction
        (VACUUM, which PostgreSQL runs only outside a transaction block: the caller has
        checked that ``ex`` has none open); the last one's rows."""
        rows: list[Row] = []
        for part in self._statement(operation).parts:
            try:
                rows = ex.execute(part, {**self._params(), **params})
            except Exception as exc:
                told = self._told(exc, operation, True)
                if told is exc:
                    raise
                raise told from exc
        return rows

    def _told(self, exc: Exception, operation: str, in_transaction: bool) -> Exception:
        """What to raise for ``exc``, raised by ``operation``'s statement: a missing table, a
        serialization failure in the caller's transaction (which only a new transaction can
        mend, not a wait) or an outage in the queue's terms; dbqueue's own errors and the rest
        as they are."""
        if isinstance(exc, QueueTableMissing):
            return self._missing(exc)
        if isinstance(exc, DBQueueError):
            return exc
        if in_transaction and sqlstate(exc) == SERIALIZATION_FAILURE:
            return SnapshotTooOld(self.spec.table, operation)
        if is_outage(exc):
            return unavailable(exc, self.spec.table, operation, in_transaction)
        return exc

    def _rows[R: tuple[Any, ...]](
        self, ex: Executor, operation: str, params: dict[str, Any], row: type[R]
    ) -> list[R]:
        """Run ``operation`` and read its rows by name as ``row``, a NamedTuple of its first
        columns."""
        width = len(row._fields)  # type: ignore[attr-defined]
        make = row._make  # type: ignore[attr-defined]
        return [make(r[:width]) for r in self._run(ex, operation, params)]

    def _missing(self, exc: QueueTableMissing) -> QueueTableMissing:
        """What to tell of a relation the database says does not exist (``exc``)."""
        return QueueTableMissing(
            f"queue {self.spec.table!r}: its tables do not exist in this database ({exc}); "
            f"apply the migrations (Django: manage.py migrate; SQLAlchemy: "
            f"metadata.create_all() or alembic upgrade) or create them with "
            f"dbqueue.schema.create_statements()"
        )

    def _run_block(self, ex: Executor, stmt: Statement, params: dict[str, Any]) -> list[Row]:
        # After the statement that returns rows, :ids names those rows (see sqlite/split.sql).
        result: list[Row] = []
        for part in stmt.parts:
            rows = ex.execute(part, params)
            if rows:
                result = rows
                ids = [NumberRow._make(r[:1]).number for r in rows]
                params = {**params, "ids": self.dialect.array(ids)}
            elif "RETURNING" in part:
                params = {**params, "ids": self.dialect.array([])}
        return result

    def _clock(self, **extra: Any) -> dict[str, Any]:
        """Times for dialects without a usable server clock (SQLite), else nothing."""
        if not self.dialect.client_clock:
            return {}
        now = dt.datetime.now(dt.UTC)
        tp = self.dialect.time_param
        return {"now": tp(now), **{k: tp(now + v) for k, v in extra.items()}}

    def _wake(self, ex: Executor) -> None:
        """NOTIFY the queue's channel unless this process did so within notify_interval.

        Races between threads only cost a spare notification. A notification sent in a
        transaction that rolls back is lost with it, and pushes in the following interval send
        none: workers still poll for a while after their last message (see dbqueue.wakeup), and
        an idle worker's safety poll bounds the rest.
        """
        every = self._notify_every
        if every is None:
            return
        now = time.monotonic()
        if now - self._last_notify < every:
            return
        self._last_notify = now
        if ex.in_transaction():  # its failure is the caller's transaction's: nothing committed
            self._run(ex, "notify", {"channel": self.spec.channel})
            return
        # Outside a transaction the write before it has committed: whatever happens to the
        # notification (the session ended between the two statements: a DBA's
        # pg_terminate_backend, a pooler, a fast shutdown) must not make the caller believe
        # nothing was written, or a producer that retries on ``stored=False`` writes it twice.
        # The workers miss one wake-up and find the item by polling.
        try:
            self._run(ex, "notify", {"channel": self.spec.channel})
        except Exception as exc:
            log.warning("%s: written, but its wake-up was not sent: %s", self.spec.table, exc)
