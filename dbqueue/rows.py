"""The rows the statements every layout runs return, read by name (never by position): each
a NamedTuple of a statement's first columns (:meth:`dbqueue.statements.Statements._rows`).
The ring's own rows are in :mod:`dbqueue.ring.states`, the split queue's in
:mod:`dbqueue.split`."""

from __future__ import annotations

from typing import Any, NamedTuple


class NumberRow(NamedTuple):
    """A row naming one item: a split queue's id, a ring's message number."""

    number: int


class StateRow(NamedTuple):
    """A row of a statement that changed items' state (fail, rescue, a ring's sweep): the
    item and its new :class:`~dbqueue.message.State`."""

    number: int
    state: int


class StatsRow(NamedTuple):
    """The row of ``<layout>_stats``: counts per state, the oldest due item's time and the
    database's now; a ring's slot count, slots in use and spilled messages (NULL for a split
    queue); cancelled items (0 for a ring)."""

    ready: int
    scheduled: int
    leased: int
    expired: int
    done: int
    failed: int
    oldest_ready: Any
    now: Any
    slots: int | None
    in_slots: int | None
    spilled: int | None
    cancelled: int


class ValueRow(NamedTuple):
    """The one value of a statement that returns one (a size, a flag, a time)."""

    value: Any
