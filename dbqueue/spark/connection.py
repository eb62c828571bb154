"""Connecting to the queue's database from the Spark driver and executors.

Spark ships the data source's options to every executor, so what names the database is a
string: a libpq connection string (``host=... dbname=...``) or a URL (``postgresql://...``;
SQLAlchemy's ``postgresql+psycopg://`` spelling is accepted too, so one ``DBQUEUE_URL`` serves
the ``dbqueue`` command and Spark). Every executor opens its own connections: on a cluster,
each executor host needs network access to the database.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import psycopg

from dbqueue.errors import InvalidArgument, UnsupportedDatabase

#: A URL's scheme, with SQLAlchemy's optional ``+driver``.
_SCHEME = re.compile(r"^(?P<scheme>[a-zA-Z][a-zA-Z0-9.-]*)(?:\+[a-zA-Z0-9_]+)?://")
_POSTGRESQL = {"postgresql", "postgres"}


def conninfo(url_or_dsn: str) -> str:
    """The libpq connection string (or URL) psycopg connects with, from a URL or a libpq
    string; refuses other databases with a clear error."""
    if not isinstance(url_or_dsn, str) or not url_or_dsn.strip():
        raise InvalidArgument("dbqueue needs the database: option url (or dsn) is empty")
    text = url_or_dsn.strip()
    match = _SCHEME.match(text)
    if match is None:
        return text  # a libpq key=value string
    scheme = match.group("scheme").lower()
    if scheme not in _POSTGRESQL:
        raise UnsupportedDatabase(
            f"the dbqueue Spark source needs PostgreSQL (COPY, SKIP LOCKED); got a {scheme!r} URL"
        )
    return "postgresql://" + text[match.end() :]


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
