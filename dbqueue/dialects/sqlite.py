"""SQLite >= 3.35 (RETURNING). One writer at a time, in-process: no round trips to save, so a
multi-statement block inside one transaction costs what one statement costs elsewhere.

Storage formats follow Django's and SQLAlchemy's SQLite conventions so rows read back through
either ORM: datetimes as UTC text ``YYYY-MM-DD HH:MM:SS.ffffff``, UUIDs as 32 hex digits,
decimals as text, JSON as text.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import sqlite3
import uuid
from collections.abc import Sequence
from typing import Any, ClassVar

from dbqueue.dialects.base import Converter, Dialect
from dbqueue.errors import UnsupportedDatabase
from dbqueue.spec import Field, FieldKind

MIN_VERSION = (3, 35, 0)

_TYPES = {
    FieldKind.SMALLINT: "smallint",
    FieldKind.INTEGER: "integer",
    FieldKind.BIGINT: "bigint",
    FieldKind.FLOAT: "real",
    FieldKind.DECIMAL: "decimal",
    FieldKind.TEXT: "text",
    FieldKind.BOOLEAN: "bool",
    FieldKind.DATETIME: "datetime",
    FieldKind.DATE: "date",
    FieldKind.JSON: "text",
    FieldKind.BYTES: "BLOB",
    FieldKind.UUID: "char(32)",
}


def _utc_text(value: dt.datetime) -> str:
    if value.utcoffset() is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    # Not strftime("%Y-%m-%d ..."): glibc's %Y writes year 15 as "15", which neither SQLite's
    # date functions nor fromisoformat read back (found by the arbitrary-arguments test).
    # isoformat pads the year to four digits; the space separator is SQLite's.
    return value.isoformat(" ", "microseconds")


# Connections opened with detect_types (Django's are) convert declared datetime/date/bool/decimal
# columns themselves; values computed in SQL arrive as text. The decoders accept both.


def _parse_aware(value: str | dt.datetime) -> dt.datetime:
    parsed = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(value)
    return parsed.replace(tzinfo=dt.UTC) if parsed.tzinfo is None else parsed


def _parse_naive(value: str | dt.datetime) -> dt.datetime:
    return value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(value)


def _parse_date(value: str | dt.date) -> dt.date:
    return value if isinstance(value, dt.date) else dt.date.fromisoformat(value)


def _to_decimal(value: Any) -> decimal.Decimal:
    return value if isinstance(value, decimal.Decimal) else decimal.Decimal(str(value))


_ENCODERS: dict[FieldKind, Converter] = {
    FieldKind.DATETIME: _utc_text,
    FieldKind.DATE: dt.date.isoformat,
    FieldKind.DECIMAL: str,
    FieldKind.UUID: lambda u: u.hex,
    FieldKind.BOOLEAN: int,
}

_DECODERS: dict[FieldKind, Converter] = {
    FieldKind.DATE: _parse_date,
    FieldKind.DECIMAL: _to_decimal,
    FieldKind.UUID: uuid.UUID,
    FieldKind.BOOLEAN: bool,
    FieldKind.JSON: json.loads,
}


def check_version(version: str = sqlite3.sqlite_version) -> None:
    """Raise :class:`UnsupportedDatabase` if this SQLite lacks RETURNING."""
    parts = tuple(int(p) for p in version.split(".")[:3])
    if parts < MIN_VERSION:
        raise UnsupportedDatabase(
            f"dbqueue needs SQLite >= {'.'.join(map(str, MIN_VERSION))} (RETURNING); "
            f"this Python links SQLite {version}"
        )


class SQLite(Dialect):
    name: ClassVar[str] = "sqlite"
    client_clock = True

    def param(self, name: str) -> str:
        return f":{name}"

    def period_start(self, period_param: str) -> str:
        # The client's clock, as every time on SQLite (:now).
        period = self.param(period_param)
        start = f"(CAST(strftime('%s', :now) AS INTEGER) / {period}) * {period}"
        return f"strftime('%Y-%m-%dT%H:%M:%SZ', {start}, 'unixepoch')"

    def column_type(self, f: Field) -> str:
        if f.kind is FieldKind.TEXT and f.max_length is not None:
            return f"varchar({f.max_length})"
        return _TYPES[f.kind]

    def array(self, values: Sequence[Any]) -> Any:
        # Lists travel as JSON text and are read with json_each().
        return json.dumps(list(values), separators=(",", ":"), default=str)

    def encoder(self, kind: FieldKind) -> Converter | None:
        return _ENCODERS.get(kind)

    def decoder(self, kind: FieldKind, aware: bool) -> Converter | None:
        if kind is FieldKind.DATETIME:
            return _parse_aware if aware else _parse_naive
        return _DECODERS.get(kind)

    def time_param(self, value: dt.datetime | None) -> Any:
        return None if value is None else _utc_text(value)

    def time_result(self, value: Any) -> dt.datetime | None:
        return None if value is None else _parse_aware(value)
