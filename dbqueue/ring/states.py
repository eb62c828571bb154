"""The named values the ring's SQL and its Python share: slot states, the outcomes of a blocked
push, and the rows its statements return (read by name, never by position).

The SQL files write them as ``{slot_ready}``, ``{side_spilled}``, ``{push_evict}``...:
:func:`sql_constants` is what :func:`dbqueue.sql.ring_context` fills them in from, so a value
changes in one place."""

from __future__ import annotations

from enum import IntEnum
from typing import Any, NamedTuple

from dbqueue.errors import InvalidArgument, shown
from dbqueue.message import State, StateSelector


class SlotState(IntEnum):
    """The ``state`` column of a ring slot."""

    #: Free: the next lap's pusher may write it (its ``seq`` is the number it last held).
    EMPTY = 0
    #: Holds message ``seq``, waiting for the popper of that number.
    READY = 1
    #: Holds message ``seq``, leased to a consumer until ``lease_until`` (at-least-once).
    LEASED = 2


class SideState(IntEnum):
    """The ``state`` column of the side table ``<table>_failed`` (the messages out of the
    ring): the values of :class:`~dbqueue.message.State` it shares with a split queue's meta
    table, and SPILLED, which only a ring has."""

    #: Waiting to be pushed again at the tail once ``run_at`` has passed (a retry's back-off,
    #: or put aside by a pusher or the sweeper).
    READY = State.READY
    #: A lease a pusher moved out of its way, until ``lease_until``.
    LEASED = State.LEASED
    #: Failed for good.
    FAILED = State.FAILED
    #: Pushed while the ring was full (``when_full="spill"``): the overflow, pushed into the
    #: ring at the tail, in the order it spilled, as slots free up. Counted as ready.
    SPILLED = 4


#: The states of the side table, in the order the admin lists them.
SIDE_STATES = tuple(SideState)


class PushOutcome(IntEnum):
    """What ``ring_push_blocked`` did with a number whose slot was not free for it."""

    #: The slot was empty and lapped behind the number: written over the gap.
    WRITE = 1
    #: A consumer held the slot: its message was moved to the side table, then written.
    EVICT = 2
    #: The number was given up on (the slot is past it), or the slot is held and the push runs
    #: in a transaction: take a new number.
    RENEW = 3
    #: The slot holds a message no popper claimed yet: the ring is full. Try again later.
    WAIT = 4
    #: Someone is writing the slot right now (locked): take a new number, never wait for it.
    BUSY = 5

    @property
    def landed(self) -> bool:
        return self in (PushOutcome.WRITE, PushOutcome.EVICT)


def sql_constants() -> dict[str, str]:
    """``{slot_ready}``, ``{side_failed}``, ``{push_evict}``... for the ring's SQL."""
    values: dict[str, str] = {}
    enums: tuple[tuple[str, type[IntEnum]], ...] = (
        ("slot", SlotState),
        ("side", SideState),
        ("push", PushOutcome),
    )
    for prefix, enum in enums:
        for member in enum:
            values[f"{prefix}_{member.name.lower()}"] = str(int(member))
    return values


#: The slot states of the messages a ring lists, by name (what the adapters filter items by).
ITEM_STATES = {"ready": SlotState.READY, "leased": SlotState.LEASED}


def item_state(state: State | str | int) -> SlotState:
    """The slot state of a message state a ring's slots hold ("ready", "leased"), or
    InvalidArgument (failed messages, and those waiting out a retry's back-off, are in the side
    table: Model.queue.failed())."""
    name = state.lower() if isinstance(state, str) else State(state).name.lower()
    if name not in ITEM_STATES:
        raise InvalidArgument(
            f"a ring queue's slots hold {' and '.join(ITEM_STATES)} messages; got {shown(state)} "
            f"(failed messages, and those waiting for a retry, are in its side table: "
            f"Model.queue.failed())"
        )
    return ITEM_STATES[name]


#: The slot state of the message states a slot can hold.
SLOT_OF_STATE = {State.READY: SlotState.READY, State.LEASED: SlotState.LEASED}
#: The slot state of the items a purge takes that a slot can hold (a slot's ready message is
#: always due: the scheduled ones wait in the side table).
SLOT_OF_SELECTOR = {StateSelector.READY: SlotState.READY, StateSelector.LEASED: SlotState.LEASED}


# -- rows -------------------------------------------------------------------------------------


class PushRow(NamedTuple):
    """A row of ``ring_push`` and ``ring_push_many``: a number, and whether it landed."""

    number: int
    landed: bool


class BlockedRow(NamedTuple):
    """The row of ``ring_push_blocked`` (PostgreSQL): the outcome, and the slot's number as it
    was (None when it was locked)."""

    number: int
    outcome: int
    slot_seq: int | None


class PopRow(NamedTuple):
    """A row of a pop: a message taken, or a claim not taken (``taken`` false; with the slot as
    it is now in the statements that look, else None)."""

    number: int
    taken: bool
    slot_seq: int | None
    slot_state: int | None
    attempts: int | None
    pushed_at: Any
    lease_until: Any
    last_error: str | None


class CountersRow(NamedTuple):
    """The row of ``ring_counters``: the next number of each counter."""

    push_next: int
    pop_next: int


class SweepRow(NamedTuple):
    """The row of ``ring_sweep`` and ``ring_sweep_side`` (PostgreSQL)."""

    ready: int
    failed: int
    victims: int


class ReturnRow(NamedTuple):
    """The row of ``ring_return`` (PostgreSQL): how many were pushed again, of how many due,
    whether messages were due while another sweeper held the lock (then none was returned),
    and whether pushers hold numbers that no popper has claimed yet."""

    placed: int
    due: int
    busy: bool
    ahead: bool
