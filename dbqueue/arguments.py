"""Checking what callers pass before any SQL runs: counts, durations and priorities against
the columns' real ranges, and the items a consumer settles as delivery tokens ``(id,
attempts)``. Every failure is an :class:`~dbqueue.errors.InvalidArgument` naming the value."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from dbqueue.errors import InvalidArgument, shown
from dbqueue.spec import PRIORITY_MAX, PRIORITY_MIN

#: Something that names a leased item: a Message, an object with ``id`` and ``attempts``
#: attributes (a model instance), or — as an element of a list — an ``(id, attempts)`` tuple:
#: a delivery token, which fences a consumer's ack, fail, extend and release. A bare id names
#: the item whatever its delivery: for the operator's operations (retry, delete, ack_by_id,
#: fail_by_id). A tuple passed on its own is a sequence of items.
TokenLike = Any
Token = tuple[int, int | None]

ZERO = dt.timedelta(0)


#: The columns' real ranges: ids and counts are bigint, attempts smallint.
BIGINT_MAX = 2**63 - 1
ATTEMPTS_MAX = 2**15 - 1
#: The longest lease, delay or back-off: now plus it stays inside the range of every
#: database's timestamps (and of Python's datetime, which computes it).
MAX_DURATION = dt.timedelta(days=365_000)
#: The latest ``run_at`` a push takes: an upper bound like the durations'. A fixed date, not
#: "now + MAX_DURATION", so that a refusal is the same on every clock (SQLite's times are the
#: client's, PostgreSQL's the server's) and in every test. 9000-01-01 UTC is far past any real
#: schedule and keeps MAX_DURATION (about 999 years) and months more below Python's
#: datetime.max (9999-12-31), the tightest limit (PostgreSQL's timestamps run to 294276): a
#: run_at, anything computed from it by adding a duration dbqueue allows, its display in any
#: time zone (UTC-12 to UTC+14), and Django admin's date drill-down (which computes the next
#: year) all stay in range.
MAX_RUN_AT = dt.datetime(9000, 1, 1, tzinfo=dt.UTC)
#: The earliest instant a run_at may name: year 1 in UTC. An aware datetime early in year 1
#: with an offset east of UTC is before it, and has no UTC time Python or a database reads back.
MIN_RUN_AT = dt.datetime.min.replace(tzinfo=dt.UTC)


def positive(name: str, value: int | None, default: int) -> int:
    """``value`` checked to be a positive int in the bigint range, or ``default`` when None."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= BIGINT_MAX:
        raise InvalidArgument(
            f"{name} must be a positive int (at most 2**63 - 1), got {shown(value)}"
        )
    return value


def check_duration(name: str, value: object, *, zero: bool) -> dt.timedelta:
    """``value`` checked to be a timedelta, positive (or zero if ``zero``), at most
    :data:`MAX_DURATION`."""
    low = "non-negative" if zero else "positive"
    if (
        not isinstance(value, dt.timedelta)
        or value < ZERO
        or (value == ZERO and not zero)
        or value > MAX_DURATION
    ):
        raise InvalidArgument(
            f"{name} must be a {low} timedelta of at most {MAX_DURATION.days:,} days, "
            f"got {shown(value)}"
        )
    return value


def check_run_at(name: str, value: object) -> dt.datetime:
    """``value`` checked to be an aware datetime between :data:`MIN_RUN_AT` and
    :data:`MAX_RUN_AT` (inclusive); ``name`` is the argument the error names."""
    if not isinstance(value, dt.datetime) or value.utcoffset() is None:
        raise InvalidArgument(f"{name} must be an aware datetime, got {shown(value)}")
    # Aware datetimes compare as instants, without converting either (no overflow).
    if value > MAX_RUN_AT:
        raise InvalidArgument(
            f"{name} must be at most {MAX_RUN_AT.isoformat(' ')}, got {shown(value)}"
        )
    if value < MIN_RUN_AT:
        raise InvalidArgument(
            f"{name} must be at least {MIN_RUN_AT.isoformat(' ')}, got {shown(value)}"
        )
    return value


def check_priority(priority: int) -> None:
    """Raise InvalidArgument unless ``priority`` is an int in the smallint range."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidArgument(f"priority must be an int, got {shown(priority)}")
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise InvalidArgument(
            f"priority {shown(priority)} is out of range ({PRIORITY_MIN}..{PRIORITY_MAX})"
        )


def check_count(operation: str, n: int) -> None:
    """Raise InvalidArgument unless ``n`` is a positive int in the bigint range."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= BIGINT_MAX:
        raise InvalidArgument(
            f"{operation} needs a positive int count (at most 2**63 - 1), got {shown(n)}"
        )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _token_of(item_id: object, attempts: object, item: object) -> Token:
    if isinstance(item_id, bool) or not isinstance(item_id, int) or not 0 <= item_id <= BIGINT_MAX:
        raise InvalidArgument(f"not an item or id (ids are ints, 0..2**63 - 1): {shown(item)}")
    item_id = int(item_id)  # an int subclass (a Pushed id) binds as a plain int
    if attempts is None:
        return (item_id, None)
    if isinstance(attempts, bool) or not isinstance(attempts, int):
        raise InvalidArgument(f"attempts must be an int: {shown(item)}")
    if not 0 <= attempts <= ATTEMPTS_MAX:
        raise InvalidArgument(f"attempts must be in 0..{ATTEMPTS_MAX}: {shown(item)}")
    return (item_id, int(attempts))


def to_token(item: TokenLike) -> Token:
    """Normalise one of the forms in :data:`TokenLike` to ``(id, attempts | None)``, checked
    against the columns' ranges."""
    if _is_int(item):
        return _token_of(item, None, item)
    if isinstance(item, tuple) and len(item) == 2:
        return _token_of(item[0], item[1], item)
    item_id, attempts = getattr(item, "id", None), getattr(item, "attempts", None)
    return _token_of(item_id, attempts if _is_int(attempts) else None, item)


def to_tokens(items: TokenLike | Iterable[TokenLike]) -> list[Token]:
    """One item or many, deduplicated by id (the last token wins), in first-seen order."""
    if _is_int(items) or hasattr(items, "id"):
        items = [items]
    if items is None or isinstance(items, str | bytes | bytearray | Mapping):
        raise InvalidArgument(_NOT_ITEMS + shown(items))
    try:
        iterator = iter(items)
    except TypeError:
        raise InvalidArgument(_NOT_ITEMS + shown(items)) from None
    tokens: dict[int, Token] = {}
    for item in iterator:
        token = to_token(item)
        tokens[token[0]] = token
    return list(tokens.values())


def fenced(items: TokenLike | Iterable[TokenLike], operation: str) -> list[Token]:
    """The delivery tokens of ``items`` for a consumer's ``operation`` (ack, fail, extend,
    release), each with its attempt: a bare id is refused, since it would settle whichever
    delivery holds the item now (a redelivered copy another worker is handling)."""
    tokens = to_tokens(items)
    bare = [t[0] for t in tokens if t[1] is None]
    if bare:
        raise InvalidArgument(
            f"{operation}() takes the items popped (messages, model instances or (id, attempts) "
            f"tokens), not bare ids (got {shown(bare[:5])}): an id alone would settle whichever "
            f"delivery holds the item now. An operator settles by id with ack_by_id() or "
            f"fail_by_id()."
        )
    return tokens


_NOT_ITEMS = (
    "items must be an item (a message or a model instance), an id, an (id, attempts) tuple, "
    "or an iterable of them; got "
)
