"""An outage (retried) told apart from an error in what was sent (never retried), for the
errors of psycopg and sqlite3, bare or as Django and SQLAlchemy wrap them."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest
import sqlalchemy.exc
from psycopg import errors as pg

from dbqueue.outage import is_outage


@pytest.mark.parametrize(
    "error",
    [
        pg.AdminShutdown("terminating connection due to administrator command"),
        pg.CannotConnectNow("the database system is starting up"),
        pg.ConnectionFailure("connection failure"),
        pg.ReadOnlySqlTransaction("cannot execute UPDATE in a read-only transaction"),
        pg.DeadlockDetected("deadlock detected"),
        pg.SerializationFailure("could not serialize access"),
        pg.TooManyConnections("too many clients"),
        psycopg.OperationalError("consuming input failed: server closed the connection"),
        psycopg.InterfaceError("the connection is closed"),
        sqlite3.OperationalError("database is locked"),
        sqlite3.OperationalError("disk I/O error"),
    ],
    ids=lambda e: type(e).__name__ + ":" + str(e)[:20],
)
def test_outages(error: Exception) -> None:
    assert is_outage(error)


@pytest.mark.parametrize(
    "error",
    [
        psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes"),
        pg.NumericValueOutOfRange("value out of range"),
        pg.RaiseException("refused by a trigger"),
        pg.UniqueViolation("duplicate key"),
        pg.UndefinedColumn("column does not exist"),
        sqlite3.IntegrityError("refused by a trigger"),
        sqlite3.OperationalError("no such column: x"),
        UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"),
        ValueError("anything else"),
    ],
    ids=lambda e: type(e).__name__ + ":" + str(e)[:20],
)
def test_errors_in_what_was_sent(error: Exception) -> None:
    assert not is_outage(error)


def _django_wrapped(cause: Exception) -> Exception:
    """As Django raises it: its own class, the driver's error as __cause__."""
    from django.db import utils

    try:
        raise utils.OperationalError(str(cause)) from cause
    except utils.OperationalError as exc:
        return exc


def test_wrapped_errors_are_judged_by_the_driver_error_inside() -> None:
    lost = pg.AdminShutdown("terminating connection")
    refused = pg.RaiseException("refused")
    assert is_outage(sqlalchemy.exc.OperationalError("UPDATE", {}, lost))
    assert not is_outage(sqlalchemy.exc.InternalError("UPDATE", {}, refused))
    assert is_outage(_django_wrapped(lost))
    assert not is_outage(_django_wrapped(refused))


def test_sqlalchemy_s_invalidated_connection_is_an_outage() -> None:
    exc = sqlalchemy.exc.DBAPIError("SELECT 1", {}, ValueError("x"), connection_invalidated=True)
    assert is_outage(exc)


@pytest.mark.postgresql
def test_what_a_real_server_raises(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.DataError) as nul:
            conn.execute("SELECT %s::text", ["a\x00b"])
        assert not is_outage(nul.value)
        with pytest.raises(pg.RaiseException) as raised:
            conn.execute("DO $$ BEGIN RAISE EXCEPTION 'refused'; END $$")
        assert not is_outage(raised.value)
        conn.execute("SELECT 1")  # still usable
        victim = psycopg.connect(pg_dsn, autocommit=True)
        pid = victim.info.backend_pid
        conn.execute("SELECT pg_terminate_backend(%s)", [pid])
        with pytest.raises(psycopg.OperationalError) as lost:
            victim.execute("SELECT 1")
        assert is_outage(lost.value)
        victim.close()
