"""Unique items: a push whose key an item of the queue already holds returns that item.

A split queue that declares uniqueness (``QueueOptions.unique``, ``unique_scope`` or
``unique_period``) has one more meta column, ``unique_key``, and a partial unique index on it
over the states of its scope. A push with a key inserts its meta row with ``ON CONFLICT DO
NOTHING`` (PostgreSQL) or ``INSERT OR IGNORE`` (SQLite) before its data row, in the caller's
transaction: the index decides between concurrent pushers (a second pusher waits for the
first one's transaction, then finds the key taken), so there is no read-then-write race and no
advisory lock. A duplicate's push returns the existing item's id (:class:`Pushed`, with
``duplicate`` True) and writes nothing.

The scope (:class:`UniqueScope`) says while an item holds its key; ``unique_period`` adds the
period to the key (aligned windows: the key of a push is the key plus the start of the period
it falls in, as River's ByPeriod), so one item per key per period.

The ring layout has no unique items: its push rewrites a preallocated slot in place, a
heap-only update that touches no index, which is where its speed and its constant size come
from; a unique index over the slots' keys would make every push and every pop write index
entries (see the docs' "Unique items").
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Any

from dbqueue.errors import InvalidArgument, InvalidSpec, shown
from dbqueue.message import State

#: The meta column that holds an item's unique key (NULL: the item is not unique).
UNIQUE_KEY_COLUMN = "unique_key"
#: The longest key stored as given; a longer one derived from fields is stored as its digest.
MAX_KEY_LENGTH = 255
#: The prefix of a derived key stored as a digest.
DIGEST_PREFIX = "sha256:"


class UniqueScope(StrEnum):
    """While an item holds its unique key, so that a push with the same key returns it."""

    #: While it waits: ready or scheduled (a retry's back-off included). Once a worker leases
    #: it, the key is free again: a push during its run is a new item (procrastinate's
    #: queueing lock). Its key is dropped at that lease, so a retry of it is not deduplicated.
    QUEUED = "queued"
    #: Until it finishes: ready, scheduled, leased, or cancelling. Done (acked), failed and
    #: cancelled items free the key. The default.
    UNFINISHED = "unfinished"
    #: As long as its row is stored, whatever its state: done items kept by ``keep_done``,
    #: failed and cancelled ones until they are purged. Usually with ``unique_period``.
    STORED = "stored"

    @property
    def states(self) -> tuple[State, ...]:
        """The states in which an item holds its key."""
        if self is UniqueScope.QUEUED:
            return (State.READY,)
        if self is UniqueScope.UNFINISHED:
            return (State.READY, State.LEASED, State.CANCELLING)
        return tuple(State)


def index_predicate(scope: UniqueScope) -> str:
    """The WHERE clause of the partial unique index (and of the look for the holder): a key
    is held by a row with a key in one of the scope's states (any state for ``stored``)."""
    held = f"{UNIQUE_KEY_COLUMN} IS NOT NULL"
    if scope is UniqueScope.STORED:
        return held
    return f"{held} AND state IN ({', '.join(str(int(s)) for s in scope.states)})"


def check_unique_key(key: object) -> str:
    """``key`` if it is a valid explicit unique key, else InvalidArgument (before any SQL)."""
    if not isinstance(key, str) or not key:
        raise InvalidArgument(f"unique_key must be a non-empty str, got {shown(key)}")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidArgument(
            f"unique_key is {len(key)} characters long; at most {MAX_KEY_LENGTH} are allowed "
            f"(derive a shorter one, e.g. a digest of the long value)"
        )
    if "\x00" in key:
        raise InvalidArgument("unique_key contains a NUL character, which no text column stores")
    return key


def derived_key(names: Sequence[str], payload: Mapping[str, Any]) -> str:
    """The key of a payload from the declared fields' values: ``name=value`` pairs as compact
    JSON (values a JSON document cannot hold as their text), or its SHA-256 digest when that is
    longer than :data:`MAX_KEY_LENGTH`."""
    text = _KEY_JSON.encode({name: payload.get(name) for name in names})
    if len(text) > MAX_KEY_LENGTH:
        return DIGEST_PREFIX + hashlib.sha256(text.encode()).hexdigest()
    return text


def _text(value: object) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    return str(value)


#: One encoder for every key: json.dumps() with options builds a new one per call, which was
#: most of a unique push_many's client time.
_KEY_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=_text)


def item_keys(
    names: Sequence[str], payloads: Iterable[Mapping[str, Any]], explicit: str | None = None
) -> list[str | None]:
    """Each payload's key: ``explicit`` (checked) if given, else derived from the declared
    field ``names``, else None (a queue that declares no fields deduplicates only pushes that
    pass a key)."""
    if explicit is not None:
        key = check_unique_key(explicit)
        return [key for _ in payloads]
    if not names:
        return [None for _ in payloads]
    return [derived_key(names, p) for p in payloads]


def unique_columns(declared: Any, columns: Mapping[str, str], label: str) -> Any:
    """A front's ``unique`` option with the names its declarations use (a Django field's name,
    a mapped attribute) replaced by their columns, from ``columns`` (name -> column); an
    InvalidSpec naming ``label`` for a name that is none of them. Anything but a name or a
    sequence of names is returned as given, for :class:`~dbqueue.spec.QueueOptions` to refuse."""
    names = (declared,) if isinstance(declared, str) else declared
    if not isinstance(names, tuple | list):
        return declared
    unknown = [n for n in names if isinstance(n, str) and n not in columns]
    if unknown:
        raise InvalidSpec(
            f"{label}: unique names {', '.join(map(repr, unknown))}, not a payload field; its "
            f"fields: {', '.join(sorted(columns)) or '(none)'}"
        )
    return tuple(columns.get(n, n) if isinstance(n, str) else n for n in names)


class Pushed(int):
    """The id of a pushed item, and whether the push found it already there.

    An ``int`` (what ``push`` always returned): ``duplicate`` is True when the queue is unique
    and an item held the push's key, whose id this is; nothing was written then.
    """

    duplicate: bool

    def __new__(cls, item_id: int, duplicate: bool = False) -> Pushed:
        pushed = super().__new__(cls, item_id)
        pushed.duplicate = duplicate
        return pushed

    def __repr__(self) -> str:
        return f"Pushed({int(self)}, duplicate={self.duplicate})"

    def __str__(self) -> str:  # the number, as str() of an int: repr() tells the rest
        return int.__repr__(self)
