"""What a pop returns, item states and delivery modes."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Any

from dbqueue.errors import InvalidArgument, shown


class State(IntEnum):
    """The ``state`` column of the meta table."""

    READY = 0
    LEASED = 1
    DONE = 2
    FAILED = 3
    # 4 is a ring's SideState.SPILLED, which shares this numbering.
    #: Never ran, or its handler was asked to stop: kept like a failed item until purged.
    CANCELLED = 5
    #: Still leased, its cancellation requested: its ack, fail or release records it
    #: cancelled, and it is never delivered again.
    CANCELLING = 6

    @classmethod
    def parse(cls, value: State | str | int) -> State:
        """Accept a State, its name in any case ("failed") or its number."""
        try:
            if isinstance(value, str):
                return cls[value.upper()]
            # Only ints: State(Decimal("sNaN")) raises what no caller expects, and 1.0 would
            # pass for leased.
            if isinstance(value, int) and not isinstance(value, bool):
                return cls(value)
        except (KeyError, ValueError):
            pass
        names = ", ".join(s.name.lower() for s in cls)
        raise InvalidArgument(f"unknown state {shown(value)}; use one of {names}")


class StateSelector(StrEnum):
    """Which items ``purge()`` and ``count()`` take: those of one state as
    :class:`QueueStats` counts them. ``scheduled`` is not a stored state: it is the ready
    items due later (a delay, a retry's back-off), and ``ready`` the ones due now. A ring has
    no done items.

    ``leased`` takes the items whose cancellation was requested too (still leased), and
    ``cancelled`` those cancelled, and those whose cancellation was requested and whose lease
    has ended (nothing will deliver them again).

    With ``older_than``, an item's age counts from when it was pushed (ready, scheduled,
    leased), or from when it finished (done), failed (failed) or was cancelled (cancelled).
    """

    READY = "ready"
    SCHEDULED = "scheduled"
    LEASED = "leased"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @classmethod
    def parse(cls, value: StateSelector | State | str | int) -> StateSelector:
        """Accept a selector, its name in any case ("scheduled"), or a :class:`State` (or
        its number): ``State.READY`` selects the ready items due now, as "ready" does."""
        if isinstance(value, str):
            try:
                return cls(value.lower())
            except ValueError:
                pass
        # Only ints: see State.parse.
        elif isinstance(value, int) and not isinstance(value, bool) and value in set(State):
            # A cancelling item is still leased: stats count it so until its lease ends.
            state = State.LEASED if value == State.CANCELLING else State(value)
            return cls(state.name.lower())
        names = ", ".join(cls)
        raise InvalidArgument(f"unknown state {shown(value)}; use one of {names}")

    @property
    def state(self) -> State:
        """The stored state of the items (scheduled items are ready)."""
        return State.READY if self is StateSelector.SCHEDULED else State[self.name]

    @property
    def due(self) -> bool | None:
        """For the ready items: True for those due now, False for those due later; None for
        the other states."""
        return {StateSelector.READY: True, StateSelector.SCHEDULED: False}.get(self)


class CancelOutcome(StrEnum):
    """What ``cancel()`` did to one item."""

    #: It was ready (due now or scheduled): it is cancelled and will never run.
    CANCELLED = "cancelled"
    #: It was leased: cancellation is requested. Its handler can see it
    #: (``cancel_requested``), and its ack, fail or release records it cancelled.
    REQUESTED = "requested"
    #: It was cancelled already, or its cancellation requested: nothing changed.
    ALREADY = "already"
    #: It had finished (done or failed): nothing changed.
    FINISHED = "finished"
    #: No such item (never pushed, acked and removed, or purged).
    MISSING = "missing"


#: What ``purge()`` and ``count()`` take for a state: a selector, its name, a State or its number.
SelectorLike = StateSelector | State | str | int


class DeliveryMode(StrEnum):
    """How ``pop_batch`` hands items over (see the design notes)."""

    AT_MOST_ONCE = "at_most_once"
    AT_LEAST_ONCE = "at_least_once"
    TRANSACTIONAL = "transactional"

    @classmethod
    def parse(cls, value: DeliveryMode | str) -> DeliveryMode:
        try:
            return cls(value)
        except ValueError:
            modes = ", ".join(m.value for m in cls)
            raise InvalidArgument(
                f"unknown delivery mode {shown(value)}; use one of {modes}"
            ) from None


@dataclass(slots=True)
class Message:
    """One popped item: its meta columns and its payload."""

    id: int
    attempts: int
    priority: int
    run_at: dt.datetime
    lease_until: dt.datetime | None
    enqueued_at: dt.datetime
    last_error: str | None = None
    payload: dict[str, Any] = field(default_factory=dict)

    @property
    def token(self) -> tuple[int, int]:
        """The lease token: ack/fail/extend change the row only while it still matches."""
        return (self.id, self.attempts)


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Counts per state and the age of the oldest due item."""

    ready: int
    scheduled: int
    leased: int
    expired: int
    done: int
    failed: int
    oldest_ready_age: dt.timedelta | None
    #: Ring queues: the number of slots (None for a split queue).
    capacity: int | None = None
    #: Ring queues: the slots holding a message (the others are waiting or leased in the side
    #: table, out of the ring).
    in_slots: int | None = None
    #: Ring queues: the messages that found the ring full and wait in its overflow
    #: (``when_full="spill"``); counted in ``ready`` too.
    spilled: int | None = None
    #: Cancelled items, and those whose cancellation was requested and whose lease ended
    #: (a ring has none).
    cancelled: int = 0

    @property
    def occupancy(self) -> float | None:
        """Ring queues: the share of slots holding a message (ready or leased)."""
        if not self.capacity:
            return None
        return (self.in_slots or 0) / self.capacity

    def as_dict(self) -> dict[str, Any]:
        """The counts by name (and ``capacity`` for a ring queue)."""
        counts = {
            "ready": self.ready,
            "scheduled": self.scheduled,
            "leased": self.leased,
            "expired": self.expired,
            "done": self.done,
            "failed": self.failed,
            "cancelled": self.cancelled,
            "oldest_ready_age": self.oldest_ready_age,
        }
        if self.capacity is not None:
            counts["capacity"] = self.capacity
            counts["in_slots"] = self.in_slots or 0
            counts["spilled"] = self.spilled or 0
        return counts

    def report(self) -> dict[str, Any]:
        """What the adapters' ``stats()`` return: :meth:`as_dict`, and for a ring queue its
        ``occupancy`` too."""
        counts = self.as_dict()
        if self.capacity is not None:
            counts["occupancy"] = self.occupancy
        return counts


@dataclass(frozen=True, slots=True)
class RescueResult:
    """What a rescue run did: expired leases made ready again, or failed for good."""

    ready: int = 0
    failed: int = 0
    #: Ring queues: numbers given up on (their pusher rolled back or died) marked as holes.
    holes: int = 0
    #: Ring queues: messages of the side table pushed again at the tail (retries whose
    #: back-off ended, messages made ready again or put aside by a pusher).
    returned: int = 0


def format_age(age: dt.timedelta | None) -> str:
    """``4.8 s``, ``3 min 12 s``, ``2 h 5 min``, ``3 d 4 h``; "-" for no age (how the admin
    and the ``dbqueue stats`` table show ``oldest_ready_age``)."""
    if age is None:
        return "-"
    seconds = age.total_seconds()
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, sec = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {sec} s"
