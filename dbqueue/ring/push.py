"""Pushing into a ring: the hot path, a slot that is not free, and backpressure.

The hot path is one statement per message or batch (``ring_push``, ``ring_push_many``): a
number, written into its slot if the slot is empty and holds the number minus the capacity.
A message whose slot was not free goes through ``ring_push_blocked`` (PostgreSQL), which never
waits for a consumer: a leased or stranded message is moved to the side table and the push
written (outside a transaction), a gap left by dead pushers is written over, a number given
up on or a slot being written is traded for a new number. Only a ring that really holds
``capacity`` undelivered messages is full, and then the queue's ``when_full`` decides: the
message spills into the side table (state spilled, under its number) and is pushed into the
ring later, by a pop that finds the ring empty or by the sweeper (``ring_return``); or
:class:`~dbqueue.errors.QueueFull` at once; or the push waits (backpressure), up to
``push_timeout``, then QueueFull. The hot path is the same statement in every mode: a mode
only decides what happens after it found no slot.

A push inside the caller's transaction writes each message once, whatever it meets: an attempt
that does not land writes nothing, and it never moves another message (that move would hold
the other message's row until the caller commits): it takes a new number instead.

SQLite has one writer and transactional counters: a push lands at the counter's slot, moving a
leased message aside first, or the ring is full (then, spilling, that message and the rest of
its batch spill).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Iterable, Mapping
from typing import Any

from dbqueue.arguments import positive
from dbqueue.errors import InvalidArgument, QueueFull, UnsupportedOperation, shown
from dbqueue.executor import Executor
from dbqueue.ring.base import RingBase
from dbqueue.ring.states import BlockedRow, PushOutcome, PushRow
from dbqueue.rows import NumberRow
from dbqueue.spec import UNIQUE_HINT, WhenFull
from dbqueue.unique import Pushed

#: Backpressure: the first and the longest sleep between attempts of a push.
WAIT_FIRST, WAIT_MAX = 0.001, 0.05

#: A message still waiting to land: its index in the call, and its number (None: a new one).
Pending = tuple[int, int | None]
#: The statements of a push: what a ring with consumer groups does as a whole, and what one
#: of its groups does not do.
PUSH_OPERATIONS = frozenset(
    {"push", "push_locked", "push_many", "push_many_locked", "push_blocked", "spill",
     "next_slot", "lagging"}
)  # fmt: skip


class RingPush(RingBase):
    """The push half of :class:`~dbqueue.ring.RingQueue`."""

    @staticmethod
    def _fifo_only(priority: int, delay: dt.timedelta | None, run_at: dt.datetime | None) -> None:
        # The type first: comparing some values (Decimal('sNaN')) with 0 raises.
        if isinstance(priority, bool) or not isinstance(priority, int) or priority != 0:
            raise InvalidArgument(
                f"a ring queue delivers in push order: it has no priorities (got priority="
                f"{shown(priority)}); use a split queue (Django: QueueModel, SQLAlchemy: "
                f"QueueMixin) for prioritised work"
            )
        if delay is not None or run_at is not None:
            raise InvalidArgument(
                "a ring queue delivers in push order: it cannot delay a message (delay= or "
                "run_at=); use a split queue (Django: QueueModel, SQLAlchemy: QueueMixin) for "
                "scheduled work"
            )

    def push(
        self,
        ex: Executor,
        payload: Mapping[str, Any],
        *,
        priority: int = 0,
        delay: dt.timedelta | None = None,
        run_at: dt.datetime | None = None,
        unique_key: str | None = None,
    ) -> Pushed:
        """Enqueue one message in the executor's transaction; return its number (its id).

        If the ring holds ``capacity`` undelivered messages, ``when_full`` decides: spill (the
        message waits in the overflow; its id there), raise QueueFull at once, or wait up to
        ``push_timeout`` for a free slot, then raise QueueFull. A ring has no unique items:
        ``unique_key`` raises UnsupportedOperation.
        """
        if unique_key is not None:
            raise UnsupportedOperation(
                f"queue {self.spec.table!r} is a ring, which has no unique items (push takes no "
                f"unique_key): {UNIQUE_HINT}"
            )
        self._fifo_only(priority, delay, run_at)
        ids = self._push_all(ex, [self.codec.encode(payload)])
        self._wake(ex)
        return Pushed(ids[0])

    def push_many(
        self,
        ex: Executor,
        rows: Iterable[Mapping[str, Any]],
        *,
        priority: int = 0,
        delay: dt.timedelta | None = None,
        run_at: dt.datetime | None = None,
        batch_size: int | None = None,
    ) -> list[Pushed]:
        """Enqueue many messages, one statement per batch; return their numbers in input order.

        Every row is validated before the first statement runs. The messages of a batch
        larger than the free slots spill, or wait for poppers, as a single push does; if
        QueueFull is raised, it says which messages were pushed (outside a transaction those
        are committed).
        """
        self._fifo_only(priority, delay, run_at)
        encoded = self.codec.encode_many(rows)
        size = positive("batch_size", batch_size, self.spec.options.push_many_batch)
        ids: list[int] = []
        for start in range(0, len(encoded), size):
            try:
                ids.extend(self._push_all(ex, encoded[start : start + size]))
            except QueueFull as exc:
                rest = len(encoded) - len(ids) - len(exc.pushed)
                pushed = [*ids, *exc.pushed, *([None] * rest)]
                raise self._full(pushed) from None
        if ids:
            self._wake(ex)
        return [Pushed(i) for i in ids]

    @property
    def _when_full(self) -> WhenFull:
        return self.spec.options.when_full_mode

    def _full(
        self, pushed: list[int | None], *, can_wait: bool = True, lagging: str | None = None
    ) -> QueueFull:
        """The QueueFull of a push that found the ring full, in the terms of its mode (with
        consumer groups, naming the ``lagging`` ones)."""
        table, capacity = self.spec.table, self.capacity
        if self._when_full is WhenFull.RAISE:
            advice = "declare when_full='spill' (an overflow table), "
            return QueueFull(
                table, capacity, pushed, "when_full='raise'", advice=advice, lagging=lagging
            )
        if not can_wait:
            why = (
                "and SQLite cannot wait inside a transaction (no popper can run while it "
                "holds the write lock)"
            )
            return QueueFull(table, capacity, pushed, why, can_wait=False, lagging=lagging)
        return QueueFull(table, capacity, pushed, "after waiting push_timeout", lagging=lagging)

    def _push_all(
        self, ex: Executor, rows: list[list[Any]], numbers: list[int] | None = None
    ) -> list[int]:
        """Push every row; where the ring is full, spill, raise or wait (backpressure) up to
        push_timeout, as ``when_full`` says; under ``numbers`` already taken for them
        (PostgreSQL), else under new ones."""
        if not self._sequences:
            return self._push_serial(ex, rows)
        ids: list[int | None] = [None] * len(rows)
        pending: list[Pending] = [
            (i, numbers[i] if numbers is not None else None) for i in range(len(rows))
        ]
        mode = self._when_full
        wait = self.spec.options.push_timeout if mode is WhenFull.WAIT else dt.timedelta(0)
        deadline = time.monotonic() + wait.total_seconds()
        evict = not ex.in_transaction()
        pause, renewed = WAIT_FIRST, 0
        lagging: list[str] = []
        while pending:
            waiting, renew = self._attempt(ex, rows, pending, ids, evict, lagging)
            renewed = renewed + 1 if renew else 0
            # A number traded for a new one is tried again at once, unless a whole lap of them
            # found no slot: every slot is held (by consumers, while this push may not move
            # them), so this is a full ring too.
            lapped = renewed > self.capacity
            if mode is WhenFull.SPILL and (waiting or lapped):
                self._spill(ex, rows, waiting + renew if lapped else waiting, ids)
                pending = [] if lapped else renew
                continue
            pending = renew + waiting
            if waiting or lapped:
                if time.monotonic() >= deadline:
                    raise self._full(ids, lagging=lagging[-1] if lagging else None)
                self._sleep(ex, pause)
                pause = min(pause * 2, WAIT_MAX)
        return [n for n in ids if n is not None]

    def _spill(
        self, ex: Executor, rows: list[list[Any]], full: list[Pending], ids: list[int | None]
    ) -> None:
        """``ring_spill``: the messages that found the ring full, into the side table under
        their numbers (a new one where None), in one statement; fills ``ids``."""
        spilled = self._rows(ex, "spill", self._batch_params(rows, full), NumberRow)
        for (i, _), row in zip(full, spilled, strict=True):
            ids[i] = int(row.number)

    def _attempt(
        self,
        ex: Executor,
        rows: list[list[Any]],
        pending: list[Pending],
        ids: list[int | None],
        evict: bool,
        lagging: list[str],
    ) -> tuple[list[Pending], list[Pending]]:
        """One attempt at every pending message: the hot path, then ring_push_blocked for each
        one that did not land. Fills ``ids``, and ``lagging`` with the consumer groups a
        message waits for; returns what waits (same number) and what takes a new number."""
        waiting: list[Pending] = []
        renew: list[Pending] = []
        hot = self._try_hot(ex, rows, pending, locked=not evict)
        for (i, _), result in zip(pending, hot, strict=True):
            if result.landed:
                ids[i] = result.number
                continue
            blocked = self._blocked(ex, result.number, rows[i], evict, lagging)
            if blocked.landed:
                ids[i] = result.number
            elif blocked is PushOutcome.WAIT:
                waiting.append((i, result.number))
            else:
                renew.append((i, None))
        return waiting, renew

    def _try_hot(
        self, ex: Executor, rows: list[list[Any]], pending: list[Pending], *, locked: bool
    ) -> list[PushRow]:
        """The hot path for the pending messages: one statement for one, or for a batch;
        ``locked`` inside a caller's transaction (see ``_locked`` in ring.sql)."""
        suffix = "_locked" if locked else ""
        params: dict[str, Any]
        if len(pending) == 1:
            i, number = pending[0]
            params = dict(zip(self._param_names, rows[i], strict=True), p=number)
            return self._rows(ex, f"push{suffix}", params, PushRow)
        return self._rows(ex, f"push_many{suffix}", self._batch_params(rows, pending), PushRow)

    @staticmethod
    def _batch_params(rows: list[list[Any]], pending: list[Pending]) -> dict[str, Any]:
        """The parameters of a batch statement (``_batch`` in ring.sql): the numbers, NULL for
        a new one, and one array per payload column."""
        params: dict[str, Any] = {"ps": [number for _, number in pending]}
        for c, column in enumerate(zip(*(rows[i] for i, _ in pending), strict=True)):
            params[f"c{c}"] = list(column)
        return params

    def _blocked(
        self,
        ex: Executor,
        number: int,
        values: list[Any],
        evict: bool,
        lagging: list[str] | None = None,
    ) -> PushOutcome:
        """``ring_push_blocked`` for one number (see its comment in ring.sql); with consumer
        groups, the groups it waits for go into ``lagging`` (ring_groups.sql)."""
        params = dict(
            zip(self._param_names, values, strict=True),
            p=number,
            evict=evict,
            hole_timeout=self.spec.options.hole_timeout,
        )
        (raw,) = self._run(ex, "push_blocked", params)
        row = BlockedRow._make(raw[: len(BlockedRow._fields)])
        if self.spec.options.groups and raw[-1] and lagging is not None:
            lagging.append(str(raw[-1]))
        self._check_number(number, row.slot_seq)
        return PushOutcome(row.outcome)

    # -- SQLite ---------------------------------------------------------------------------------

    def _push_serial(self, ex: Executor, rows: list[list[Any]]) -> list[int]:
        """One writer, transactional counters: the whole batch lands in one transaction, or
        (the ring is full) none of it and the push raises or waits, outside a transaction;
        spilling, what does not fit spills in that transaction."""
        mode = self._when_full
        if mode is WhenFull.SPILL:
            return self._push_or_spill_serial(ex, rows)
        deadline = time.monotonic() + self.spec.options.push_timeout.total_seconds()
        pause = WAIT_FIRST
        while True:
            landed = self._try_serial(ex, rows)
            if landed is not None:
                return landed
            nothing: list[int | None] = [None] * len(rows)
            if mode is WhenFull.RAISE or not self._may_wait(ex):
                raise self._full(nothing, can_wait=False, lagging=self._lagging(ex))
            if time.monotonic() >= deadline:
                raise self._full(nothing, lagging=self._lagging(ex))
            self._sleep(ex, pause)
            pause = min(pause * 2, WAIT_MAX)

    def _push_or_spill_serial(self, ex: Executor, rows: list[list[Any]]) -> list[int]:
        """The batch in one transaction: each message into the ring while it has room, the
        first that finds it full and every later one (no popper runs meanwhile) spilled."""
        with ex.atomic():
            landed: list[int] = []
            for k, values in enumerate(rows):
                try:
                    landed.append(self._push_one_serial(ex, values))
                except _Full:
                    return landed + [self._spill_serial(ex, v) for v in rows[k:]]
            return landed

    def _spill_serial(self, ex: Executor, values: list[Any]) -> int:
        params = dict(zip(self._param_names, values, strict=True), **self._clock())
        return int(self._rows(ex, "spill", params, NumberRow)[0].number)

    def _try_serial(self, ex: Executor, rows: list[list[Any]]) -> list[int] | None:
        landed: list[int] = []
        with contextlib.suppress(_Full), ex.atomic():
            for values in rows:
                landed.append(self._push_one_serial(ex, values))
            return landed
        return None

    def _push_one_serial(self, ex: Executor, values: list[Any]) -> int:
        params = dict(zip(self._param_names, values, strict=True), **self._clock())
        for _ in range(2):
            pushed = self._rows(ex, "push", params, NumberRow)
            if pushed:
                return pushed[0].number
            # The next slot is not free: a leased message is moved aside, then try again.
            if not self._run(ex, "push_blocked", self._clock()):
                break
        number, slot_seq = self._run(ex, "next_slot", {})[0]
        self._check_number(int(number), slot_seq)
        raise _Full

    def _lagging(self, ex: Executor) -> str | None:
        """SQLite, a ring with consumer groups: the groups that hold an untaken message in the
        next number's slot, with how far behind each one is (None without groups)."""
        if not self.spec.options.groups:
            return None
        ((lagging,),) = self._run(ex, "lagging", {})
        return None if lagging is None else str(lagging)


class _Full(Exception):
    """Raised inside a SQLite push's transaction to undo it: the ring is full."""
