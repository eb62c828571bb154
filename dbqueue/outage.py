"""Telling a database outage from an error in what was sent.

A worker retries through an outage (the server restarting, a dropped connection, a failover
that left it on a read-only standby, a deadlock or serialization failure): the same statement
works once the database is back. Any other database error comes from the statement or its
data (a text the column cannot hold, a value out of range, a constraint): retried, it fails
the same way forever, so it must not be waited out.

The errors come from psycopg, asyncpg or sqlite3, bare (the core's executors) or wrapped by a
framework: SQLAlchemy keeps the driver's exception as ``orig``, Django as ``__cause__``.
"""

from __future__ import annotations

from dbqueue.errors import QueueUnavailable

#: SQLSTATE classes of a lost or refused connection, of resources the server ran out of, and
#: of system errors (I/O): nothing in the statement is wrong.
_OUTAGE_CLASSES = ("08", "53", "57", "58")
#: Single SQLSTATEs that go away on their own: a transaction refused on a read-only standby
#: (the primary failed over), a deadlock, a serialization failure, a lock not available.
_OUTAGE_STATES = frozenset({"25006", "40001", "40P01", "55P03"})
#: sqlite3 errors that go away on their own: another writer holds the lock, the file system.
_SQLITE_OUTAGE_WORDS = ("locked", "busy", "disk i/o", "unable to open")


def is_outage(exc: BaseException) -> bool:
    """True if ``exc`` (a driver's error, bare or wrapped) says the database is unreachable or
    busy for now, so that the same statement should be tried again later."""
    for error in _chain(exc):
        if isinstance(error, QueueUnavailable):
            return True
        if getattr(error, "connection_invalidated", False):  # SQLAlchemy: the connection died
            return True
        if isinstance(error, ConnectionError | TimeoutError):  # the socket, under any driver
            return True
        module = type(error).__module__.split(".")[0]
        if module in ("psycopg", "asyncpg"):
            return _postgresql_outage(error)
        if module == "sqlite3":
            return _sqlite_outage(error)
    return False


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of the driver error ``exc`` is or wraps (PostgreSQL drivers), else None."""
    for error in _chain(exc):
        state = getattr(error, "sqlstate", None)
        if isinstance(state, str):
            return state
    return None


def is_unique_violation(exc: BaseException) -> bool:
    """True if ``exc`` (a driver's error, bare or wrapped) is a unique index refusing a row."""
    for error in _chain(exc):
        if getattr(error, "sqlstate", None) == "23505":
            return True
        if type(error).__module__ == "sqlite3" and "UNIQUE constraint failed" in str(error):
            return True
    return False


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the driver errors it wraps (``orig``, ``__cause__``), outermost first."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not s for s in seen) and len(seen) < 8:
        seen.append(current)
        orig = getattr(current, "orig", None)
        current = orig if isinstance(orig, BaseException) else current.__cause__
    return seen


def unavailable(
    exc: BaseException, queue: str, operation: str, not_stored: bool
) -> QueueUnavailable:
    """The :class:`QueueUnavailable` for an outage ``exc`` met by ``operation``: a write is
    known not stored if the caller knows (``not_stored``: never sent, or sent in a transaction,
    which cannot commit now) or the server answered with an error (the statement was refused);
    otherwise the connection broke with the statement in flight, and its outcome is
    unknown."""
    answered = any(getattr(e, "sqlstate", None) for e in _chain(exc))
    sqlite = any(type(e).__module__ == "sqlite3" for e in _chain(exc))  # a local file: refused
    stored = False if (answered or sqlite or not_stored) else None
    return QueueUnavailable(queue, operation, stored, exc)


#: Errors psycopg and asyncpg raise without a SQLSTATE for a lost, closed or refused connection.
_CLIENT_OUTAGES = frozenset(
    {"OperationalError", "InterfaceError", "ConnectionDoesNotExistError",
     "ConnectionFailureError"}
)  # fmt: skip


def _postgresql_outage(error: BaseException) -> bool:
    state = getattr(error, "sqlstate", None)
    if state:
        return state in _OUTAGE_STATES or state[:2] in _OUTAGE_CLASSES
    # No SQLSTATE: raised by the client. A lost or closed connection is an OperationalError
    # or an InterfaceError (psycopg), a ConnectionDoesNotExistError (asyncpg); a DataError (a
    # NUL in a text) is the data's.
    return type(error).__name__ in _CLIENT_OUTAGES


def _sqlite_outage(error: BaseException) -> bool:
    if type(error).__name__ != "OperationalError":
        return False
    text = str(error).lower()
    return any(word in text for word in _SQLITE_OUTAGE_WORDS)
