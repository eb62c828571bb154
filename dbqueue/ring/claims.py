"""Pop claims and holes (PostgreSQL): the numbers a popper took from ``<table>_pop_seq`` whose
message it has not taken yet, and what becomes of them.

A pop takes new numbers and tries their slots at once; nearly always the message is there. A
claim whose message has not landed (its push is still in flight, or in a transaction not yet
committed) is kept by the process, in :class:`Claims`, and tried again at its next pop. Looked
at again, a claim is one of:

* **landed**: its slot holds it, ready (more landed than the pop could take): taken next time;
* **pending**: its slot still holds an older number: kept, until ``hole_timeout``; then
  - over an empty slot, its pusher rolled back or died: the slot is *marked* as holding the
    number (``ring_mark_holes``), so a late pusher fails its condition and takes a new one;
  - over a ready message, claimed before (a popper died holding it, or has not come back
    for it), its pusher took a new number: dropped;
* **dead**: its slot is past it (marked, written over, the message moved): dropped at once.

A slot that still holds an older message, even one a consumer leases, keeps the claim pending:
its pusher may be about to move that message aside and write (``ring_push_blocked``), and a
claim dropped then would strand the message it was waiting for.

A claim dropped by mistake loses nothing: its message, should it land, is *stranded* (ready,
behind the pop sequence), and the next pusher of its slot or the sweeper puts it aside to be
pushed again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum, auto

from dbqueue.ring.states import PopRow, SlotState

#: At most this many claims a popper keeps waiting for their push to land.
MAX_HELD_CLAIMS = 10_000


@dataclass(slots=True)
class Claim:
    """A pop number this process holds."""

    number: int
    #: When this process took it (time.monotonic()).
    since: float
    #: Found not landed yet: tried at every pop, but not counted against its ``n``.
    parked: bool = True


@dataclass(slots=True)
class Claims:
    """The claims of one process, shared by its threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    held: dict[int, Claim] = field(default_factory=dict)

    def take(self) -> list[Claim]:
        """Remove and return every claim, lowest number first."""
        with self.lock:
            claims = sorted(self.held.values(), key=lambda c: c.number)
            self.held.clear()
            return claims

    def give_back(self, claims: Iterable[Claim]) -> None:
        with self.lock:
            for c in claims:
                self.held[c.number] = c
            if len(self.held) > MAX_HELD_CLAIMS:
                # Dropped here is not lost: once its message lands, it is stranded and put
                # aside to be pushed again (see the module docstring).
                for number in sorted(self.held)[: len(self.held) - MAX_HELD_CLAIMS]:
                    del self.held[number]

    def __len__(self) -> int:
        return len(self.held)


class Verdict(Enum):
    """What a claim not taken is, looked at with its slot (see the module docstring)."""

    LANDED = auto()
    PENDING = auto()
    HOLE = auto()
    DEAD = auto()
    MISMATCH = auto()


def judge(row: PopRow, claim: Claim, capacity: int, hole_timeout: float, now: float) -> Verdict:
    """The verdict on ``claim``, not taken by a pop whose ``row`` shows its slot."""
    q, seq, state = row.number, row.slot_seq, row.slot_state
    if seq is None or seq % capacity != q % capacity:
        return Verdict.MISMATCH
    if seq > q or (seq == q and state != SlotState.READY):
        return Verdict.DEAD
    if seq == q:
        return Verdict.LANDED
    if now - claim.since < hole_timeout:
        return Verdict.PENDING
    return Verdict.HOLE if state == SlotState.EMPTY else Verdict.DEAD


def now() -> float:
    """The clock claims are timed with."""
    return time.monotonic()
