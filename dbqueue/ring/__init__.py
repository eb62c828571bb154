"""The ring queue: ``capacity`` preallocated slots, numbered pushes and pops (the LMAX
Disruptor pattern in SQL; docs/explanation/design.md, "The ring layout").

A pusher takes number ``p`` from ``<table>_push_seq`` and writes slot ``p % capacity`` if it is
empty and holds ``p - capacity``; a popper takes ``q`` from ``<table>_pop_seq`` and takes slot
``q % capacity`` if it holds message ``q``. The table never grows or shrinks and no indexed
column changes, so every update is HOT and the queue leaves no bloat behind. Each hot path is
one statement: a push, a pop, an ack, or a worker's ack of one batch and pop of the next.

Messages out of the ring live in its side table ``<table>_failed``: a failed attempt leaves its
slot at once (ready again at the tail after its back-off, or failed for good), and a pusher
that meets a slot a consumer holds (a leased message, or one a dead popper stranded) moves the
message there, its lease token intact, instead of waiting. So a slot is never held hostage by
a consumer, and :class:`~dbqueue.errors.QueueFull` means the ring really holds ``capacity``
undelivered messages.

The parts, by concern:

* :mod:`dbqueue.ring.push` — the hot push, a slot that is not free, backpressure;
* :mod:`dbqueue.ring.pop` — pops, and settling (ack, ack_pop, fail, extend) in the slots and
  the side table;
* :mod:`dbqueue.ring.claims` — pop numbers whose message has not landed yet, and holes;
* :mod:`dbqueue.ring.sweeper` — the sweeper, and the side table's way back into the ring;
* :mod:`dbqueue.ring.states` — the names the SQL and the Python share (slot states, push
  outcomes, rows);
* :mod:`dbqueue.ring.queue` — :class:`RingQueue` and the administrator's operations.

SQLite has one writer and transactional counters (``<table>_push_seq`` is a one-row table):
a number is only consumed by a push that lands and a pop that takes its message, in the same
transaction, so there are no holes, strands or claims there, only backpressure, leases and
the side table.
"""

from dbqueue.ring.queue import RingQueue, slot_row
from dbqueue.ring.states import ITEM_STATES, SLOT_OF_STATE, PushOutcome, SlotState, item_state

__all__ = [
    "ITEM_STATES",
    "SLOT_OF_STATE",
    "PushOutcome",
    "RingQueue",
    "SlotState",
    "item_state",
    "slot_row",
]
