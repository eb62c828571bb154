"""The database engines dbqueue supports, by name."""

from __future__ import annotations

from dbqueue.dialects.base import Dialect
from dbqueue.dialects.postgresql import PostgreSQL
from dbqueue.dialects.sqlite import SQLite
from dbqueue.errors import UnsupportedDatabase

DIALECTS: dict[str, Dialect] = {d.name: d for d in (PostgreSQL(), SQLite())}


def get_dialect(name: str) -> Dialect:
    """The dialect called ``name`` ("postgresql", "sqlite"), or UnsupportedDatabase."""
    try:
        return DIALECTS[name]
    except KeyError:
        raise UnsupportedDatabase(
            f"dbqueue does not support the {name!r} database; supported: "
            f"{', '.join(sorted(DIALECTS))}"
        ) from None


__all__ = ["DIALECTS", "Dialect", "PostgreSQL", "SQLite", "get_dialect"]
