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

Consumer groups (fan-out, ``QueueOptions.groups``): the slot table keeps the payload, written
by pushers only, and each group has a state table ``<table>_ring_<group>`` of its own, one
narrow row per slot with the slot protocol's columns (number, state, attempts, lease, last
error), its side table ``<table>_side_<group>`` and its pop counter ``<table>_pop_<group>``.
A push writes the payload and marks the message ready in every group's row of its slot, in
one statement, and only where every group has settled the slot's previous lap: a slot is free
once every group is done with it. Every consumer statement of the ring then runs unchanged on
a group's state table, reading the payload from the slot table by slot
(``sql/<dialect>/ring_groups.sql``); :meth:`RingQueue.group` is the ring as one group sees it.
A group's retries and moved copies go back into the ring for that group only (the other
groups' rows of the new number are marked settled, a hole their poppers skip), and the
queue's own side table keeps what spilled before any group got it, pushed into the ring for
every group. A group that stops taking messages stops every push once it is ``capacity``
behind: :class:`~dbqueue.errors.QueueFull` names it (``lagging``).

Of the layouts measured (bench/reports/2026-11-27-ring-fanout.md), this is "group rows" (C)
with the push marking the rows ready itself (C'). In C a group's row only says what the group
settled, and whether a message is there to take is read from the slot table, so each of the
ring's statements (pops and their claims, holes, strands, the sweeper, a pusher moving a
held copy aside) would need a version of its own; in C' a group's row is a slot of the ring
in every respect but the payload, and the ring's statements and their tests serve it as they
are. What that costs, measured side by side (bench/reports/2026-11-28-ring-fanout-cprime.md,
3 groups, pgbench): 0.90x C's throughput (3,406 against 3,770 messages/s per group), 1.36x
its WAL (1,759 against 1,296 bytes per message: G more narrow updates per push), and its
tables grew 11 % over 35 laps where C's did not move; against a ring per group it still
delivers 1.31x the messages in 0.41x the bytes.

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
