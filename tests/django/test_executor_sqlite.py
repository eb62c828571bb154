"""The Django executor on SQLite: a transaction of dbqueue's own (a retry, a cancel, a unique
push) begins with ``BEGIN IMMEDIATE``, as the core's SQLite driver does, so its first write
waits its turn behind a worker's pop instead of failing with "database is locked"."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections, transaction

from dbqueue_django.executor import DjangoExecutor

pytestmark = [
    pytest.mark.django,
    pytest.mark.sqlite,
    pytest.mark.django_db(transaction=True, databases=["sqlite"]),
]


@pytest.fixture(autouse=True)
def deferred() -> Iterator[None]:
    """The connection as a project's default settings make it: Django's deferred BEGIN (the
    suite's settings ask for IMMEDIATE)."""
    conn: Any = connections["sqlite"]
    conn.ensure_connection()
    mode, conn.transaction_mode = conn.transaction_mode, None
    yield
    conn.transaction_mode = mode


def other_writer() -> sqlite3.Connection:
    """A second connection to the same file that never waits for a lock."""
    return sqlite3.connect(connections["sqlite"].settings_dict["NAME"], timeout=0)


def test_a_transaction_of_its_own_holds_the_write_lock_from_its_begin() -> None:
    ex = DjangoExecutor("sqlite")
    other = other_writer()
    try:
        # Nothing written yet, and the lock is already this transaction's.
        with ex.atomic(), pytest.raises(sqlite3.OperationalError, match="database is locked"):
            other.execute("BEGIN IMMEDIATE")
        other.execute("BEGIN IMMEDIATE")  # released at its end
        other.execute("ROLLBACK")
    finally:
        other.close()


def test_the_projects_own_blocks_keep_their_transaction_mode() -> None:
    ex = DjangoExecutor("sqlite")
    conn = connections["sqlite"]
    other = other_writer()
    try:
        with ex.atomic():
            pass
        assert getattr(conn, "transaction_mode", None) is None
        with transaction.atomic(using="sqlite"):  # deferred, as Django begins it
            conn.cursor().execute("SELECT 1")
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
        with transaction.atomic(using="sqlite"), ex.atomic():  # joins the project's block
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
    finally:
        other.close()
