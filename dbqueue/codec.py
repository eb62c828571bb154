"""Payload validation and encoding: Python values in, bound parameters out, and back.

Validation is dialect-independent and happens before any statement runs, so a bad payload is
refused with an error that names the field and nothing is written. Encoding to the storage
format is the dialect's (see ``dialects``): PostgreSQL takes most values natively, SQLite
stores datetimes and UUIDs as text in the formats Django and SQLAlchemy also use, so rows
written by dbqueue read back correctly through either ORM.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import operator
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dbqueue.errors import InvalidPayload, PayloadTooLarge, shown
from dbqueue.spec import Field, FieldKind, QueueSpec

if TYPE_CHECKING:
    from dbqueue.dialects.base import Dialect

Converter = Callable[[Any], Any]
#: A field's check: the value normalised, and its approximate size in bytes.
Check = Callable[[Any], tuple[Any, int]]

#: ``\u0000`` in JSON text, unless its backslash is itself escaped (a literal ``\\u0000``).
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
_MISSING: Any = object()

_INT_RANGES = {
    FieldKind.SMALLINT: (-(2**15), 2**15 - 1),
    FieldKind.INTEGER: (-(2**31), 2**31 - 1),
    FieldKind.BIGINT: (-(2**63), 2**63 - 1),
}


def _fail(spec: QueueSpec, f: Field, value: object, why: str) -> InvalidPayload:
    return InvalidPayload(f"queue {spec.table!r}, field {f.name!r}: {why} (got {shown(value)})")


def _validator(spec: QueueSpec, f: Field) -> Check:
    """Build the check for one field: returns the normalised value and its approximate size.

    The check for the field's kind is chosen here, once per codec, not on every value: a
    batch of 1,000 pushes pays for the checks its fields need and nothing else."""
    check = _CHECKS[f.kind](spec, f)
    nullable = f.nullable

    def checked(value: Any) -> tuple[Any, int]:
        if value is None:
            if nullable:
                return None, 0
            raise _fail(spec, f, value, "is not nullable")
        return check(value)

    return checked


def _integer_check(spec: QueueSpec, f: Field) -> Check:
    low, high = _INT_RANGES[f.kind]
    if f.min_value is not None:
        low = max(low, f.min_value)

    def check(value: Any) -> tuple[Any, int]:
        if isinstance(value, bool):
            raise _fail(spec, f, value, "expects an integer, not a bool")
        try:
            number = operator.index(value)
        except TypeError:
            raise _fail(spec, f, value, "expects an integer") from None
        if not low <= number <= high:
            raise _fail(spec, f, value, f"is out of range for {f.kind} ({low}..{high})")
        return number, 8

    return check


def _text_check(spec: QueueSpec, f: Field) -> Check:
    max_length = f.max_length

    def check(value: Any) -> tuple[Any, int]:
        if not isinstance(value, str):
            raise _fail(spec, f, value, "expects a str")
        if max_length is not None and len(value) > max_length:
            raise _fail(spec, f, value, f"is {len(value)} characters, max {max_length}")
        if "\x00" in value:
            raise _fail(spec, f, value, "contains a NUL character, which text cannot store")
        return value, len(value) if value.isascii() else _utf8_size(spec, f, value)

    return check


def _boolean_check(spec: QueueSpec, f: Field) -> Check:
    def check(value: Any) -> tuple[Any, int]:
        if not isinstance(value, bool):
            raise _fail(spec, f, value, "expects a bool")
        return value, 1

    return check


def _float_check(spec: QueueSpec, f: Field) -> Check:
    def check(value: Any) -> tuple[Any, int]:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _fail(spec, f, value, "expects a float")
        try:
            real = float(value)
        except OverflowError:
            raise _fail(spec, f, value, "is out of range for a float") from None
        if math.isnan(real):
            # SQLite turns NaN into NULL: refused everywhere rather than lost somewhere.
            raise _fail(spec, f, value, "is NaN, which not every database can store")
        return real, 8

    return check


def _decimal_check(spec: QueueSpec, f: Field) -> Check:
    def check(value: Any) -> tuple[Any, int]:
        return _check_decimal(spec, f, value), 16

    return check


def _datetime_check(spec: QueueSpec, f: Field) -> Check:
    aware = spec.options.aware_datetimes

    def check(value: Any) -> tuple[Any, int]:
        if not isinstance(value, dt.datetime):
            raise _fail(spec, f, value, "expects a datetime")
        has_tz = value.utcoffset() is not None
        if aware and not has_tz:
            raise _fail(
                spec,
                f,
                value,
                "is a naive datetime; time zone support is on, "
                "pass an aware datetime (e.g. datetime.now(UTC); Django: timezone.now())",
            )
        if not aware and has_tz:
            raise _fail(spec, f, value, "is an aware datetime but time zone support is off")
        if has_tz:
            try:
                value.astimezone(dt.UTC)
            except OverflowError:
                raise _fail(spec, f, value, "is out of range once converted to UTC") from None
        return value, 8

    return check


def _date_check(spec: QueueSpec, f: Field) -> Check:
    def check(value: Any) -> tuple[Any, int]:
        if not isinstance(value, dt.date) or isinstance(value, dt.datetime):
            raise _fail(spec, f, value, "expects a date")
        return value, 4

    return check


def _json_check(spec: QueueSpec, f: Field) -> Check:
    limit = spec.options.max_payload_bytes

    def check(value: Any) -> tuple[Any, int]:
        if json_size_at_least(value, limit) > limit:
            raise _too_large(spec, limit, f"more than {limit} bytes in field {f.name!r}")
        try:
            text = json.dumps(value, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise _fail(spec, f, value, f"is not JSON-encodable: {exc}") from None
        if _JSON_NUL.search(text):
            raise _fail(spec, f, value, "contains a NUL character, which JSON columns reject")
        return text, _utf8_size(spec, f, text)

    return check


def _bytes_check(spec: QueueSpec, f: Field) -> Check:
    def check(value: Any) -> tuple[Any, int]:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise _fail(spec, f, value, "expects bytes")
        return bytes(value), len(value)

    return check


def _uuid_check(spec: QueueSpec, f: Field) -> Check:
    def check(value: Any) -> tuple[Any, int]:
        if isinstance(value, uuid.UUID):
            return value, 16
        if not isinstance(value, str):
            raise _fail(spec, f, value, "expects a UUID")
        try:
            return uuid.UUID(value), 16
        except ValueError:
            raise _fail(spec, f, value, "expects a UUID") from None

    return check


#: The check of each kind of field (a check builder takes the spec and the field).
_CHECKS: dict[FieldKind, Callable[[QueueSpec, Field], Check]] = {
    FieldKind.SMALLINT: _integer_check,
    FieldKind.INTEGER: _integer_check,
    FieldKind.BIGINT: _integer_check,
    FieldKind.TEXT: _text_check,
    FieldKind.BOOLEAN: _boolean_check,
    FieldKind.FLOAT: _float_check,
    FieldKind.DECIMAL: _decimal_check,
    FieldKind.DATETIME: _datetime_check,
    FieldKind.DATE: _date_check,
    FieldKind.JSON: _json_check,
    FieldKind.BYTES: _bytes_check,
    FieldKind.UUID: _uuid_check,
}


def _too_large(spec: QueueSpec, limit: int, size: str) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"queue {spec.table!r}: payload is {size}, more than max_payload_bytes={limit}; store "
        f"large content elsewhere and enqueue a reference"
    )


def json_size_at_least(value: Any, limit: int) -> int:
    """A lower bound of the size of ``value`` encoded as JSON, counted no further than just
    past ``limit``: a value far over the limit is refused before it is encoded (encoding
    100 MB took 2.6 s and 361 MB of memory to find out), and one under it is encoded at most
    a few times the limit long (escapes and UTF-8 make the text longer than the bound)."""
    size = 0
    seen: set[int] = set()
    stack = [value]
    while stack and size <= limit:
        item = stack.pop()
        if isinstance(item, str):
            size += len(item) + 2
        elif isinstance(item, dict):
            if id(item) in seen:  # a cycle: json.dumps names it
                continue
            seen.add(id(item))
            size += 1 + len(item)
            for key, member in item.items():
                stack.append(key if isinstance(key, str) else "")
                stack.append(member)
        elif isinstance(item, list | tuple):
            if id(item) in seen:
                continue
            seen.add(id(item))
            size += 1 + len(item)
            stack.extend(item)
        else:
            size += 1  # a number, a bool, null: at least a character
    return size


def _utf8_size(spec: QueueSpec, f: Field, text: str) -> int:
    """The stored size of ``text``; a lone surrogate (not encodable as UTF-8) is refused."""
    if text.isascii():
        return len(text)
    try:
        return len(text.encode())
    except UnicodeEncodeError:
        raise _fail(spec, f, text, "contains a lone surrogate, which is not valid UTF-8") from None


def _check_decimal(spec: QueueSpec, f: Field, value: Any) -> decimal.Decimal:
    if isinstance(value, bool) or not isinstance(value, decimal.Decimal | int | float | str):
        raise _fail(spec, f, value, "expects a Decimal")
    try:
        number = value if isinstance(value, decimal.Decimal) else decimal.Decimal(str(value))
    except (decimal.InvalidOperation, ValueError):  # ValueError: an int too long for str()
        raise _fail(spec, f, value, "expects a Decimal") from None
    if not number.is_finite():
        raise _fail(spec, f, value, "must be finite")
    if f.decimal_places is not None:
        try:
            number = number.quantize(decimal.Decimal(1).scaleb(-f.decimal_places))
        except decimal.InvalidOperation:
            raise _fail(spec, f, value, "does not fit the column") from None
    if f.max_digits is not None:
        digits = len(number.as_tuple().digits)
        if digits > f.max_digits:
            raise _fail(spec, f, value, f"has {digits} digits, max {f.max_digits}")
    return number


_NOT_ROWS = "push_many needs an iterable of payloads (mappings of field names to values)"
_NOT_PAYLOAD = "a payload is a mapping of field names to values"


def payload_rows(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """``rows`` as a list, checked to be an iterable of mappings with str keys (what
    ``push_many`` takes), or InvalidPayload."""
    if isinstance(rows, str | bytes | bytearray | Mapping):
        raise InvalidPayload(f"{_NOT_ROWS}, got {shown(rows)}")
    try:
        payloads = list(rows)
    except TypeError:
        raise InvalidPayload(f"{_NOT_ROWS}, got {shown(rows)}") from None
    for row in payloads:
        check_payload(row)
    return payloads


def check_payload(payload: object) -> None:
    """Raise InvalidPayload unless ``payload`` is a mapping with str keys."""
    if not isinstance(payload, Mapping) or not all(isinstance(k, str) for k in payload):
        raise InvalidPayload(f"{_NOT_PAYLOAD}, got {shown(payload)}")


class Codec:
    """Validates and encodes payloads of one queue for one dialect; decodes rows back."""

    def __init__(self, spec: QueueSpec, dialect: Dialect) -> None:
        self.spec = spec
        self.names = spec.field_names
        self._required = frozenset(f.name for f in spec.fields if not f.has_default)
        self._known = frozenset(self.names)
        #: Each field with its check and its encoder, in field order: what encode walks.
        self._plan: list[tuple[Field, Check, Converter | None]] = [
            (f, _validator(spec, f), dialect.encoder(f.kind)) for f in spec.fields
        ]
        self._decoders = [
            (i, conv)
            for i, f in enumerate(spec.fields)
            if (conv := dialect.decoder(f.kind, spec.options.aware_datetimes)) is not None
        ]
        self._limit = spec.options.max_payload_bytes

    def encode_many(self, rows: Iterable[Mapping[str, Any]]) -> list[list[Any]]:
        """:meth:`encode` each of ``rows`` (an iterable of payloads), or raise InvalidPayload."""
        encode = self._encode
        return [encode(row) for row in payload_rows(rows)]  # payload_rows checked each row

    def encode(self, payload: Mapping[str, Any]) -> list[Any]:
        """Return the bound values of ``payload`` in field order, or raise InvalidPayload."""
        check_payload(payload)
        return self._encode(payload)

    def _encode(self, payload: Mapping[str, Any]) -> list[Any]:
        keys = payload.keys()
        if keys - self._known or self._required - keys:
            self._raise_names(payload)
        values: list[Any] = []
        size = 0
        get = payload.get
        for f, check, enc in self._plan:
            value = get(f.name, _MISSING)
            if value is _MISSING:
                value = f.default_value()
            value, n = check(value)
            size += n
            values.append(enc(value) if enc is not None and value is not None else value)
        if size > self._limit:
            raise _too_large(self.spec, self._limit, f"about {size} bytes")
        return values

    def _raise_names(self, payload: Mapping[str, Any]) -> None:
        unknown = sorted(payload.keys() - self._known)
        missing = sorted(self._required - payload.keys())
        parts = []
        if unknown:
            parts.append(f"unknown field(s) {', '.join(map(repr, unknown))}")
        if missing:
            parts.append(f"missing field(s) {', '.join(map(repr, missing))}")
        raise InvalidPayload(
            f"queue {self.spec.table!r}: {'; '.join(parts)}; its fields are "
            f"{', '.join(self.names) or '(none)'}"
        )

    def decode(self, row: Sequence[Any], offset: int = 0) -> dict[str, Any]:
        """Turn the payload columns of a row (starting at ``offset``) into a dict."""
        values = row[offset : offset + len(self.names)]
        if not self._decoders:  # text, numbers, JSON on PostgreSQL: the driver's values
            return dict(zip(self.names, values, strict=True))
        values = list(values)
        for i, conv in self._decoders:
            if values[i] is not None:
                values[i] = conv(values[i])
        return dict(zip(self.names, values, strict=True))
