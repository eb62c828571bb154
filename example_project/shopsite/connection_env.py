"""The database connection settings a deployment tunes, read from the environment (see
docs/howto/deploy.md):

* ``DJANGO_CONN_MAX_AGE``: seconds a connection is kept between requests (``CONN_MAX_AGE``;
  default 0, a connection per request; ``none`` keeps it for good);
* ``DJANGO_CONN_HEALTH_CHECKS``: ``1`` checks a kept connection before a request reuses it;
* ``DJANGO_ATOMIC_REQUESTS``: ``1`` runs each request in one transaction;
* ``DATABASE_POOLING``: ``transaction`` when ``DATABASE_URL`` points at a pooler in
  transaction mode (PgBouncer): no server-side cursors, no prepared statements.

A value that is none of these is refused with the variable's name, before anything runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ImproperlyConfigured

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")
POOLING_MODES = ("", "session", "transaction")


def flag(environ: Mapping[str, str], name: str) -> bool:
    """A yes/no variable: ``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off``."""
    value = environ.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={environ[name]!r}: write 1 or 0")


def conn_max_age(environ: Mapping[str, str]) -> int | None:
    """``DJANGO_CONN_MAX_AGE``: whole seconds >= 0, or ``none`` (no limit)."""
    value = environ.get("DJANGO_CONN_MAX_AGE", "").strip().lower()
    if value == "none":
        return None
    if not value:
        return 0
    if not value.isdigit():
        raise ImproperlyConfigured(
            f"DJANGO_CONN_MAX_AGE={environ['DJANGO_CONN_MAX_AGE']!r}: write whole seconds "
            f"(0 closes the connection after each request) or 'none' (keep it)"
        )
    return int(value)


def pooling(environ: Mapping[str, str]) -> str:
    """``DATABASE_POOLING``: empty (a direct connection), ``session`` or ``transaction``."""
    value = environ.get("DATABASE_POOLING", "").strip().lower()
    if value not in POOLING_MODES:
        raise ImproperlyConfigured(
            f"DATABASE_POOLING={environ['DATABASE_POOLING']!r}: write 'transaction' or "
            f"'session' (the pooler's pool_mode), or leave it unset for a direct connection"
        )
    return value


def database_options(environ: Mapping[str, str]) -> dict[str, Any]:
    """The keys these variables set in a ``DATABASES`` entry."""
    return {
        "CONN_MAX_AGE": conn_max_age(environ),
        "CONN_HEALTH_CHECKS": flag(environ, "DJANGO_CONN_HEALTH_CHECKS"),
        "ATOMIC_REQUESTS": flag(environ, "DJANGO_ATOMIC_REQUESTS"),
        # A transaction-mode pooler hands each transaction any server connection: a cursor
        # or a prepared statement made in one is unknown to the next.
        "DISABLE_SERVER_SIDE_CURSORS": pooling(environ) == "transaction",
    }


def prepared_statements(environ: Mapping[str, str]) -> bool:
    """``DBQUEUE_PREPARED_STATEMENTS``: off behind a transaction-mode pooler (PgBouncer before
    1.21 cannot carry them)."""
    return pooling(environ) != "transaction"
