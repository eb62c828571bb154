"""Which database the shop uses, as a Django ``DATABASES["default"]`` entry.

1. ``DATABASE_URL`` if set: ``postgresql://user:password@host:port/name?sslmode=...`` (also
   ``postgres://``) or ``sqlite:///relative/path`` / ``sqlite:////absolute/path``.
2. Otherwise an embedded PostgreSQL server (pgserver, the ``embedded`` extra) whose data
   directory is ``demo-data/pg``; it is started on first use and stopped when the last
   process using it exits.
3. If pgserver is not installed, SQLite in ``demo-data/shop.sqlite3``.

A tiny parser rather than a dependency: these two URL forms are all the shop needs.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

#: Django's keys for the libpq connection parameters they correspond to.
_PG_KEYS = {
    "dbname": "NAME",
    "user": "USER",
    "password": "PASSWORD",
    "host": "HOST",
    "port": "PORT",
}

#: SQLite set up for a queue: wait for the write lock instead of failing at once, take it at
#: the start of every transaction (no failed read-to-write upgrades), and WAL so that readers
#: do not block the writer.
_SQLITE_OPTIONS = {
    "timeout": 30,
    "transaction_mode": "IMMEDIATE",
    "init_command": "PRAGMA journal_mode=WAL;",
}

#: The embedded server, kept referenced for the life of the process.
_server: Any = None


@dataclass(frozen=True)
class Database:
    """A ``DATABASES`` entry and a human description of where it points."""

    settings: dict[str, Any]
    description: str


def postgresql(url: str) -> dict[str, Any]:
    """A Django entry for a PostgreSQL URL or libpq DSN (parsed by psycopg)."""
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    try:
        info = {k: str(v) for k, v in conninfo_to_dict(url).items()}
    except ProgrammingError as exc:
        raise ImproperlyConfigured(f"DATABASE_URL is not a valid PostgreSQL URL: {exc}") from None
    entry: dict[str, Any] = {"ENGINE": "django.db.backends.postgresql"}
    entry.update({django: info.pop(libpq, "") for libpq, django in _PG_KEYS.items()})
    entry["NAME"] = entry["NAME"] or entry["USER"] or "postgres"
    entry["OPTIONS"] = info  # what is left: sslmode, connect_timeout, application_name, ...
    return entry


def sqlite(path: str | Path) -> dict[str, Any]:
    """A Django entry for a SQLite file."""
    return {"ENGINE": "django.db.backends.sqlite3", "NAME": str(path), "OPTIONS": _SQLITE_OPTIONS}


def from_url(url: str) -> Database:
    """Parse ``DATABASE_URL``."""
    parts = urlsplit(url)
    if parts.scheme in ("postgresql", "postgres"):
        entry = postgresql(url)
        where = entry["HOST"] or "local socket"
        port = f":{entry['PORT']}" if entry["PORT"] else ""
        return Database(entry, f"DATABASE_URL: {entry['NAME']} on {where}{port}")
    if parts.scheme == "sqlite":
        # sqlite:///shop.sqlite3 is relative, sqlite:////tmp/shop.sqlite3 absolute: the path
        # is what follows the third slash.
        if parts.netloc or not parts.path.startswith("/") or len(parts.path) < 2:
            raise ImproperlyConfigured(
                f"DATABASE_URL {url!r}: write a SQLite file as sqlite:///relative/path or "
                f"sqlite:////absolute/path (an in-memory database cannot hold a queue that "
                f"several connections share)"
            )
        path = Path(unquote(parts.path[1:]))
        return Database(sqlite(path), f"DATABASE_URL: SQLite file {path}")
    raise ImproperlyConfigured(
        f"DATABASE_URL {url!r}: unsupported scheme {parts.scheme!r}; use postgresql:// or "
        f"sqlite:///"
    )


def _is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def repair_handle_list(pgdata: Path, lock: Any) -> None:
    """Drop the processes that died without telling pgserver.

    pgserver lists the processes using a server in ``pgdata/.handle_pids.json`` and stops
    the server when the last one exits (atexit). A process killed before its atexit ran
    (SIGKILL; runserver's reloader, stopped by SIGTERM, SIGKILLs its child) stays listed, so
    the server would never be stopped again; one killed while rewriting the file leaves it
    empty, and every later start would fail with a JSONDecodeError.
    """
    path = pgdata / ".handle_pids.json"
    with lock:
        if not path.exists():
            return
        try:
            listed = json.loads(path.read_text())
            pids = [int(pid) for pid in listed]
        except (ValueError, TypeError):
            listed, pids = None, []
        live = [pid for pid in pids if _is_running(pid)]
        if live != listed:
            path.write_text(json.dumps(live))


def embedded(data_dir: Path) -> Database:
    """The embedded PostgreSQL server in ``data_dir/pg``, or SQLite there without pgserver."""
    global _server
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, cron), then uses
            # /tmp/runtime-$UID for pgserver's lock file, which is fine.
            warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
            from pgserver.postgres_server import PostgresServer, get_server
    except ImportError:
        path = data_dir / "shop.sqlite3"
        return Database(sqlite(path), f"SQLite file {path} (pgserver is not installed)")
    if _server is None:
        pgdata = data_dir / "pg"
        # pgserver's inter-process lock, which guards the list (a private attribute).
        repair_handle_list(pgdata, getattr(PostgresServer, "_lock", contextlib.nullcontext()))
        # cleanup_mode="stop": the server stops when the last process using it exits, and
        # its data stays for the next run.
        _server = get_server(pgdata, cleanup_mode="stop")
    entry = postgresql(str(_server.get_uri()))
    return Database(entry, f"embedded PostgreSQL (pgserver), data in {data_dir / 'pg'}")


def configure(url: str | None, data_dir: Path) -> Database:
    """``DATABASE_URL`` if given, else the embedded server (or SQLite without pgserver)."""
    return from_url(url) if url else embedded(data_dir)
