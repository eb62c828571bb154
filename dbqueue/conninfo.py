"""Connection strings for libpq (psycopg): the one place that decides what a PostgreSQL
connection opened outside a framework's pool is given, whatever named the database (a URL or
a libpq string, a SQLAlchemy URL's parts, Django's connection parameters)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from typing import Any

from dbqueue.errors import InvalidArgument, UnsupportedDatabase

#: A URL's scheme, with SQLAlchemy's optional ``+driver``.
_SCHEME = re.compile(r"^(?P<scheme>[a-zA-Z][a-zA-Z0-9.-]*)(?:\+[a-zA-Z0-9_]+)?://")
_POSTGRESQL = {"postgresql", "postgres"}


@cache
def _libpq_keywords() -> frozenset[str]:
    from psycopg import pq

    return frozenset(o.keyword.decode() for o in pq.Conninfo.get_defaults())


def libpq_conninfo(params: Mapping[str, Any]) -> str:
    """A libpq connection string from connection keywords: those libpq knows, without the
    ones set to None (frameworks add driver-only keywords, such as Django's
    ``cursor_factory``, ``context`` and ``prepare_threshold``)."""
    from psycopg.conninfo import make_conninfo

    known = _libpq_keywords()
    return make_conninfo(**{k: str(v) for k, v in params.items() if k in known and v is not None})


def conninfo(url_or_dsn: str, *, needed_by: str = "dbqueue") -> str:
    """The libpq connection string (or URL) psycopg connects with, from a URL (SQLAlchemy's
    ``postgresql+psycopg://`` spelling too) or a libpq ``key=value`` string; another database's
    URL is refused with a clear error naming ``needed_by``."""
    if not isinstance(url_or_dsn, str) or not url_or_dsn.strip():
        raise InvalidArgument("dbqueue needs the database: option url (or dsn) is empty")
    text = url_or_dsn.strip()
    match = _SCHEME.match(text)
    if match is None:
        return text  # a libpq key=value string
    scheme = match.group("scheme").lower()
    if scheme not in _POSTGRESQL:
        raise UnsupportedDatabase(
            f"{needed_by} needs PostgreSQL (COPY, SKIP LOCKED); got a {scheme!r} URL"
        )
    return "postgresql://" + text[match.end() :]
