"""Connecting to the queue's database from the Spark driver and executors.

Spark ships the data source's options to every executor, so what names the database is a
string: a libpq connection string (``host=... dbname=...``) or a URL (``postgresql://...``;
SQLAlchemy's ``postgresql+psycopg://`` spelling is accepted too, so one ``DBQUEUE_URL`` serves
the ``dbqueue`` command and Spark). Every executor opens its own connections: on a cluster,
each executor host needs network access to the database.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg

from dbqueue.conninfo import conninfo as _conninfo
from dbqueue.errors import InvalidArgument

#: Who needs PostgreSQL, in the error for another database's URL.
NEEDED_BY = "the dbqueue Spark source"


def conninfo(url_or_dsn: str) -> str:
    """The libpq connection string (or URL) of the queue's database (see
    :func:`dbqueue.conninfo.conninfo`)."""
    return _conninfo(url_or_dsn, needed_by=NEEDED_BY)


def conninfo_from(options: Mapping[str, str]) -> str:
    """The connection string named by a data source's ``url`` or ``dsn`` option."""
    url, dsn = options.get("url"), options.get("dsn")
    if url and dsn:
        raise InvalidArgument("dbqueue: give option url or option dsn, not both")
    if not (url or dsn):
        raise InvalidArgument(
            "dbqueue: option url (a postgresql:// URL) or dsn (a libpq string) is required"
        )
    return conninfo(url or dsn or "")


def connect(info: str, **kwargs: Any) -> psycopg.Connection[Any]:
    """An autocommit psycopg connection (callers open transactions explicitly)."""
    return psycopg.connect(info, autocommit=True, application_name="dbqueue-spark", **kwargs)
