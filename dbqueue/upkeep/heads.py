"""Heads: where each priority's ready items begin in a split queue's ready index.

A split queue's pop reads its ready index (priority, then due time, then id) from the start of
each priority. While a long transaction holds the xmin horizon, every item taken since it
began leaves its entry there, dead to every pop and yet to be skipped by each (no index entry
may be removed while some snapshot might need its row): at 1,000 msg/s the pops of a
five-minute hold walked up to 300,000 of them, and served 0.90x with a p99 of 1.8 s. So each
pop starts a priority at its *head* instead, a due time before which no ready item of that
priority exists (``<table>_head``, one row per priority; see ``_bands`` in
``sql/postgresql/common.sql``), and the heads move up as items are taken, by an *advance*:
the walk over the dead entries is then done once per advance, not once per pop.

A head may only move past a due time once no item due before it can appear any more. Who
could make one appear:

- a writer whose transaction has not committed yet (a push, a pop that may roll back): the
  advance first lists the transactions that hold a lock to write the meta table
  (``split_head_writers``, from ``pg_locks``, with the clock as the advance's *cap*) and waits
  until none of them does any more; it never waits for a transaction that has not touched
  the queue (a report, a ``pg_dump``), and never blocks anyone;
- a writer that takes its lock after that: it dates what it makes ready from the clock read
  after its lock (``_clock``), so after the cap, and a head never moves past the cap;
- a statement that makes an item ready with an older due time (a push with a ``run_at`` in
  the past, a release, a change of priority): it lowers that priority's head itself, in its
  own transaction (``_pushed_head``, ``_lowered``), and locks the head's row as it does, so
  an advance that read the row before and computed from an older view gives up that row
  (``split_head_advance`` updates a row only if its ``xmin`` is still the one it read).

The advance runs in two steps a tick apart (:meth:`Heads.step`), from whatever upkeeps the
queue: a worker's maintenance thread, the keeper of API consumers, a Spark stream's driver.
Without advances the pops read each priority from its last head, as before: slower under a
held horizon, never wrong. SQLite keeps no dead versions and has no heads.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any, NamedTuple

from dbqueue.executor import Executor
from dbqueue.rows import ValueRow
from dbqueue.statements import Statements

#: Seconds between two looks for priorities whose rows are missing from the head table (a push
#: writes its priority's row; one deleted by hand would hide its items until then).
BANDS_EVERY = 300.0


class WritersRow(NamedTuple):
    """The row of ``split_head_writers``: the clock, and the transactions (virtual ids) that
    held a lock to write the meta table then."""

    cap: dt.datetime
    writers: list[str]


class Heads:
    """The advance of one split queue's heads, in this process. Not thread-safe: one caller
    (a maintenance thread, the keeper) steps it."""

    def __init__(self) -> None:
        self._pending: WritersRow | None = None
        self._next_bands = 0.0

    def step(self, queue: Statements, ex: Executor) -> int:
        """Advance the heads if the writers listed at the last step have all ended, then list
        the writers again for the next step; return how many heads moved. ``ex`` must not be
        in a transaction (each statement stands on its own)."""
        moved = 0
        if time.monotonic() >= self._next_bands:
            queue._run(ex, "head_bands", {})
            self._next_bands = time.monotonic() + BANDS_EVERY
        pending = self._pending
        if pending is not None:
            if _still_writing(queue, ex, pending.writers):
                return 0
            moved = len(queue._run(ex, "head_advance", {"cap": pending.cap}))
        row = queue._rows(ex, "head_writers", {}, WritersRow)[0]
        self._pending = WritersRow(row.cap, list(row.writers or []))
        return moved


def _still_writing(queue: Statements, ex: Executor, writers: list[str]) -> bool:
    if not writers:
        return False
    params: dict[str, Any] = {"writers": writers}
    return int(queue._rows(ex, "head_writing", params, ValueRow)[0].value) > 0
