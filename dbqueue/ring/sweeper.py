"""The sweeper (``RingQueue.rescue``, run by the worker's maintenance thread) and the side
table's way back into the ring.

One sweep, in small batches, one sweeper per queue at a time:

1. messages consumers left in their slots are put aside, freeing the slots: expired leases
   (ready again, or failed after their last attempt) and, on PostgreSQL, stranded messages
   (whose number a popper claimed long ago but never took);
2. leases a pusher moved to the side table that expired: ready again, or failed;
3. the side table's ready messages that are due (retries after their back-off, messages put
   aside) are pushed again at the tail, under new numbers, where a slot is free;
4. on PostgreSQL, holes no popper marks (their popper died too) are marked.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, NamedTuple

from dbqueue.arguments import TokenLike, positive
from dbqueue.executor import Executor
from dbqueue.layout import RESCUE_ERROR
from dbqueue.message import RescueResult, State
from dbqueue.ring.base import RingBase
from dbqueue.ring.states import ReturnRow, SweepRow
from dbqueue.rows import NumberRow, StateRow
from dbqueue.spec import WhenFull

#: How long a pop, retry or release waits for another sweeper to let go of the queue's lock
#: when messages are due in the side table (the sweeper's statements take milliseconds; a
#: caller's transaction that retried messages holds it until it ends), and how often it looks.
RETURN_PATIENCE = 1.0
RETURN_POLL = 0.01


class Returned(NamedTuple):
    """What a return of due messages did: how many it pushed again at the tail, whether
    another sweeper held the queue's lock while messages were due, and whether pushers hold
    numbers no popper has claimed (messages may be in the ring that a pop did not see)."""

    placed: int
    busy: bool
    ahead: bool


class RingSweeper(RingBase):
    """The sweeper half of :class:`~dbqueue.ring.RingQueue`."""

    def rescue(self, ex: Executor, *, batch: int | None = None) -> RescueResult:
        """Sweep (see the module docstring); return how many messages were made ready again
        and failed for good, how many holes were marked and how many messages were pushed
        again at the tail."""
        size = positive("batch", batch, self.spec.options.rescue_batch)
        options = self.spec.options
        params: dict[str, Any] = {
            "n": size,
            "max_attempts": options.max_attempts,
            "lock_key": self.spec.lock_key,
            "error": RESCUE_ERROR,
            "stranded_after": options.stranded_after,
        }
        ready = failed = 0
        for operation in ("sweep", "sweep_side"):
            r, f = self._sweep_all(ex, operation, params)
            ready, failed = ready + r, failed + f
        returned = self.return_due(ex, batch=size)
        if self._overflows:
            # A consumer group's sweeper also pushes the queue's overflow into the ring (its
            # spilled messages go to every group), under the queue's own lock.
            assert self._fan_out is not None
            returned += self._fan_out.return_due(ex, batch=size)
        holes = 0
        if self._sequences:
            hole_params = {"lock_key": self.spec.lock_key, "hole_timeout": options.hole_timeout}
            holes = len(self._run(ex, "sweep_holes", hole_params))
        return RescueResult(ready, failed, holes, returned)

    def _sweep_all(self, ex: Executor, operation: str, params: dict[str, Any]) -> tuple[int, int]:
        """Run a sweep step in batches until it finds less than a batch; (ready, failed)."""
        ready = failed = 0
        size = params["n"]
        while True:
            if self._sequences:
                (row,) = self._rows(ex, operation, params, SweepRow)
                moved, buried, victims = int(row.ready), int(row.failed), int(row.victims)
            else:
                rows = self._rows(ex, operation, {**params, **self._clock()}, StateRow)
                moved = sum(1 for r in rows if r.state == State.READY)
                buried, victims = len(rows) - moved, len(rows)
            ready, failed = ready + moved, failed + buried
            if victims < size:
                return ready, failed

    @property
    def _overflows(self) -> bool:
        """Whether this is a consumer group of a ring whose own side table can hold messages:
        only a push that spills writes there, so without ``when_full="spill"`` a group's pop
        and sweep do not look (an idle group's every empty pop would run one more statement)."""
        return self._fan_out is not None and self.spec.options.when_full_mode is WhenFull.SPILL

    def return_due(self, ex: Executor, *, batch: int | None = None) -> int:
        """Push the side table's due ready messages again at the tail (while slots are free);
        return how many. On PostgreSQL, while another sweeper holds the queue's lock it returns
        none (that sweeper is doing it)."""
        return self._return_due(ex, batch).placed

    def _return_due(self, ex: Executor, batch: int | None = None) -> Returned:
        """:meth:`return_due`, whether messages were due while another sweeper held the
        queue's lock (then this call returned none of them), and whether messages may be in
        the ring that the caller's pop did not see."""
        size = positive("batch", batch, self.spec.options.rescue_batch)
        placed = 0
        if self._sequences:
            # At most one lap per statement: two numbers a lap apart fall on one slot, and
            # ring_return's UPDATE would place either, the later as readily as the earlier,
            # leaving an older message aside behind a newer one.
            size = min(size, self.capacity)
        while True:
            if self._sequences:
                params = {"n": size, "lock_key": self.spec.lock_key}
                (row,) = self._rows(ex, "return", params, ReturnRow)
                placed += int(row.placed)
                if row.busy or int(row.due) < size or int(row.placed) == 0:
                    return Returned(placed, bool(row.busy), bool(row.ahead))
            else:
                moved, due = self._return_serial(ex, size)
                placed += moved
                if due < size or moved < due:
                    # SQLite has no cheaper sign of a return committed since the pop looked
                    # than looking again: a pop that found the ring empty always does.
                    return Returned(placed, False, True)

    def return_now(self, ex: Executor) -> bool:
        """For a pop that found the ring empty, and after a retry or a release: push the due
        messages again at the tail now, waiting (at most ``RETURN_PATIENCE``) for a sweeper
        that holds the queue's lock meanwhile. True if messages may now be in the ring.

        Without the wait, a pop that met the sweeper at work found nothing although a retry
        was due, and a ``--burst`` worker took the queue for drained and stopped with it
        waiting aside (the sweeper, holding the lock, returns only what was due when its
        statement began). A sweeper that committed its return after the pop looked and before
        this call leaves nothing due and the lock free: the push sequence then runs ahead of
        the pop sequence (``ahead``), and the pop looks again.
        """
        if self._overflows and self._fan_out is not None and self._fan_out.return_due(ex):
            return True  # the queue's overflow went into the ring: look again
        deadline = time.monotonic() + RETURN_PATIENCE
        result = self._return_due(ex)
        placed, busy, waited = result.placed, result.busy, result.busy
        while busy and time.monotonic() < deadline:
            self._sleep(ex, RETURN_POLL)
            result = self._return_due(ex)
            placed, busy = placed + result.placed, result.busy
        return placed > 0 or waited or result.ahead

    def _return_serial(self, ex: Executor, size: int) -> tuple[int, int]:
        """SQLite: the due messages one by one, in one transaction; (pushed, due)."""
        moved = 0
        with ex.atomic():
            clock = self._clock()
            due = self._rows(ex, "due", {"n": size, **clock}, NumberRow)
            for row in due:
                if not self._run(ex, "return_one", {"id": row.number, **clock}):
                    break  # the ring is full: the rest stay aside
                moved += 1
        return moved, len(due)

    def retry(self, ex: Executor, ids: Iterable[TokenLike] | int) -> int:
        """Failed messages made ready again, attempts reset, and pushed again at the tail now
        (those that find the ring full wait aside, ready, for the sweeper); return how many."""
        numbers = self._ids(ids)
        if not numbers:
            return 0
        params = {"ids": self.dialect.array(numbers), **self._clock()}
        with ex.atomic():
            retried = len(self._rows(ex, "retry", params, NumberRow))
        if retried:
            self.return_now(ex)
        return retried
