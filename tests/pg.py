"""The PostgreSQL the tests use: ``DBQUEUE_TEST_DSN`` if set, else an embedded server.

The embedded server (the ``embedded`` extra: pgserver, PostgreSQL from a wheel) is started once
per test run by the first process that asks — the pytest controller, which imports the Django
test settings before xdist starts its workers — and its DSN is exported in
``DBQUEUE_TEST_DSN`` so that every worker shares that one server.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

ENV = "DBQUEUE_TEST_DSN"
_server: Any = None


def server_dsn() -> str:
    """The DSN of the test PostgreSQL server, starting the embedded one if needed."""
    global _server
    dsn = os.environ.get(ENV)
    if dsn:
        return dsn
    try:
        import pgserver
    except ImportError as exc:  # pragma: no cover - the dev extra installs it
        raise RuntimeError(
            f"no PostgreSQL for the tests: set {ENV}=postgresql://... or install the "
            f"'embedded' extra (pgserver)"
        ) from exc
    datadir = tempfile.mkdtemp(prefix="dbqueue-pg-")
    # "delete": pgserver stops the server when this process exits, then removes the directory.
    _server = pgserver.get_server(datadir, cleanup_mode="delete")  # type: ignore[attr-defined]
    dsn = str(_server.get_uri())
    os.environ[ENV] = dsn
    return dsn


def django_database(dsn: str) -> dict[str, Any]:
    """A Django DATABASES entry for a libpq DSN."""
    from psycopg.conninfo import conninfo_to_dict

    info = conninfo_to_dict(dsn)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": info.get("dbname", "postgres"),
        "USER": info.get("user", ""),
        "PASSWORD": info.get("password", ""),
        "HOST": info.get("host", ""),
        "PORT": str(info.get("port", "")),
    }


def worker_id() -> str:
    """``gw0``... under xdist, ``main`` otherwise."""
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def database_url(dsn: str, dbname: str) -> str:
    """A ``postgresql://`` URL for database ``dbname`` on the server of ``dsn`` (sockets too)."""
    from urllib.parse import quote, urlencode

    from psycopg.conninfo import conninfo_to_dict

    info = {k: str(v) for k, v in conninfo_to_dict(dsn).items()}
    user = quote(info.get("user", ""))
    password = f":{quote(info['password'])}" if info.get("password") else ""
    host = info.get("host", "")
    query = {}
    if host.startswith("/"):  # a socket directory goes in the query string
        query["host"], host = host, ""
    port = f":{info['port']}" if info.get("port") and host else ""
    if info.get("port") and not host:
        query["port"] = info["port"]
    suffix = f"?{urlencode(query)}" if query else ""
    return f"postgresql://{user}{password}@{host}{port}/{quote(dbname)}{suffix}"
