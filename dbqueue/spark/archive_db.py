"""The archive job's side of the database: its lock, the cut-off, the archivable set's count and
the fenced batch deletes (statements in ``sql/postgresql/archive.sql``).

Everything runs on one autocommit connection that the run holds from start to end: its session
holds the run's advisory lock, and each delete batch is one statement, so its own transaction.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import psycopg

from dbqueue.discovery import FoundQueue
from dbqueue.errors import DBQueueError
from dbqueue.spark.catalog import DIALECT, run
from dbqueue.spec import advisory_key
from dbqueue.sql import render


class ArchiveBusy(DBQueueError):
    """Another archive run of the same queue holds the queue's archive lock."""


def lock_key(table: str) -> int:
    """The advisory-lock key of the archive runs of queue ``table`` (signed 64-bit, the same in
    every process; distinct from the queue's own rescue lock)."""
    return advisory_key(f"dbqueue-archive:{table}")


class ArchiveTable:
    """One queue's archivable rows, through the connection ``conn`` (autocommit)."""

    def __init__(self, conn: psycopg.Connection[Any], queue: FoundQueue) -> None:
        self.conn = conn
        self.queue = queue
        self.table = queue.spec.table
        self._stmts = render(queue.spec, DIALECT, "archive")
        self._layout = queue.layout

    def _one(self, name: str, params: dict[str, Any]) -> Any:
        return run(self.conn, self._stmts[name], params)[0][0]

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the queue's archive lock for the block, or raise :class:`ArchiveBusy`."""
        key = {"key": lock_key(self.table)}
        if not self._one("archive_lock", key):
            raise ArchiveBusy(
                f"another archive run of queue {self.table!r} is in progress (it holds the "
                f"queue's archive lock): wait for it to finish; this run did nothing"
            )
        try:
            yield
        finally:
            # A broken connection ends its session, and the session's end releases the lock.
            with suppress(psycopg.Error):
                self._one("archive_unlock", key)

    def cutoff(self, older_than: dt.timedelta) -> dt.datetime:
        """The database clock's present minus ``older_than``."""
        value: dt.datetime = self._one("archive_cutoff", {"older_than": older_than})
        return value

    def count(self, cutoff: dt.datetime) -> int:
        """How many rows are in the archivable set X(cutoff) now."""
        return int(self._one(f"archive_{self._layout}_count", {"cutoff": cutoff}))

    def delete(self, ids: Sequence[int], cutoff: dt.datetime) -> int:
        """Delete those of ``ids`` still in X(cutoff), in one transaction; how many went."""
        params = {"ids": list(ids), "cutoff": cutoff}
        return int(self._one(f"archive_{self._layout}_delete", params))
