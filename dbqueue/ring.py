"""The ring queue: ``capacity`` preallocated slots, numbered pushes and pops (DESIGN.md, "Ring
queue protocol"; the LMAX Disruptor pattern in SQL).

A pusher takes number ``p`` from ``<table>_push_seq`` and writes slot ``p % capacity`` if it is
empty and holds ``p - capacity``; a popper takes ``q`` from ``<table>_pop_seq`` and takes slot
``q % capacity`` if it holds message ``q``. The table never grows or shrinks and no indexed
column changes, so every update is HOT and the queue leaves no bloat behind.

Numbers are not transactional and a process can die holding one, so the client side keeps:

* **claims** — pop numbers whose message has not landed yet (its push is still in flight).
  They are kept in this object (shared by the process's threads) and tried again at the next
  pop; one unfilled past ``hole_timeout`` although its number was handed to a pusher is
  marked as a *hole* (``ring_mark_holes``), so the late pusher takes a new number instead.
* **backpressure** — a push whose slot still holds the previous lap waits, retrying the same
  number, until ``push_timeout``; then :class:`~dbqueue.errors.QueueFull`.
* **the sweeper** (:meth:`RingQueue.rescue`, run by the worker's maintenance thread) — pushes
  again what dead or rolled-back poppers stranded and what expired leases hold, moves messages
  that used their last attempt to ``<table>_failed``, and marks holes whose popper died too.

SQLite has one writer and transactional counters (``<table>_push_seq`` is a one-row table):
a number is only consumed by a push that lands and a pop that takes its message, in the same
transaction, so there are no holes, strands or claims there, only backpressure and leases.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dbqueue.dialects.base import Dialect
from dbqueue.errors import (
    InvalidArgument,
    InvalidSpec,
    QueueFull,
    RingCapacityMismatch,
    RingNotEmpty,
)
from dbqueue.executor import Executor, Row
from dbqueue.layout import (
    RESCUE_ERROR,
    ZERO,
    Layout,
    TokenLike,
    positive,
)
from dbqueue.message import Message, QueueStats, RescueResult, State
from dbqueue.spec import QueueSpec

#: How a push attempt of one message ended: landed; wait (the slot still holds the previous
#: lap: the ring is full); behind (the slot is empty but laps behind the number: pushers of
#: the numbers in between have not written, see _push_all); renew (the number was given up
#: on: take a new one).
_LANDED, _WAIT, _BEHIND, _RENEW = "landed", "wait", "behind", "renew"
#: Backpressure: the first and the longest sleep between retries of a push.
_WAIT_FIRST, _WAIT_MAX = 0.001, 0.05

#: The ``state`` column of a ring slot (see dbqueue/sql/postgresql/ring.sql).
EMPTY, READY, LEASED, RETRYING = 0, 1, 2, 3
#: The states of the slots that hold a message, by name (what the adapters filter items by).
ITEM_STATES = {"ready": READY, "leased": LEASED, "retrying": RETRYING}
#: The slot state that ``purge`` (and what counts like it) empties for a message state.
PURGE_SLOT_STATES = {State.READY: READY, State.LEASED: LEASED}


def item_state(state: State | str | int) -> int:
    """The slot state of a message state a ring can list ("ready", "leased", "retrying"), or
    InvalidArgument (failed messages are in the failed table)."""
    name = state.lower() if isinstance(state, str) else State(state).name.lower()
    if name not in ITEM_STATES:
        raise InvalidArgument(
            f"a ring queue's slots are {', '.join(ITEM_STATES)}; got {state!r} (failed "
            f"messages are in the failed table: Model.queue.failed())"
        )
    return ITEM_STATES[name]


def slot_row(message: Message, capacity: int) -> dict[str, Any]:
    """The slot table's columns for a popped message, as the adapters build model instances
    from them (``slot`` and ``seq`` from its number)."""
    return {
        **message.payload,
        "slot": message.id % capacity,
        "seq": message.id,
        # A leased message keeps its slot; an at-most-once or transactional pop empties it.
        "state": LEASED if message.lease_until is not None else EMPTY,
        "attempts": message.attempts,
        "pushed_at": message.enqueued_at,
        "lease_until": message.lease_until,
        "last_error": message.last_error,
    }


#: At most this many claims a popper keeps waiting for their push to land.
MAX_PARKED_CLAIMS = 10_000


@dataclass(slots=True)
class _Claim:
    number: int
    since: float
    #: Checked and found not landed: tried at every pop, but not counted against its ``n``.
    parked: bool = False


@dataclass(slots=True)
class _Claims:
    """The pop numbers this process holds whose message it has not taken yet."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    held: dict[int, _Claim] = field(default_factory=dict)

    def take(self, n: int) -> tuple[list[_Claim], list[_Claim]]:
        """Remove and return up to ``n`` active claims and every parked one."""
        with self.lock:
            claims = sorted(self.held.values(), key=lambda c: c.number)
            active = [c for c in claims if not c.parked][:n]
            parked = [c for c in claims if c.parked]
            for c in (*active, *parked):
                del self.held[c.number]
            return active, parked

    def give_back(self, claims: Iterable[_Claim]) -> None:
        with self.lock:
            for c in claims:
                self.held[c.number] = c
            if len(self.held) > MAX_PARKED_CLAIMS:
                # A claim dropped here is not lost: once its message lands, the sweeper pushes
                # it again as stranded.
                for number in sorted(self.held)[: len(self.held) - MAX_PARKED_CLAIMS]:
                    del self.held[number]

    def __len__(self) -> int:
        return len(self.held)


class RingQueue(Layout):
    """Operations on one ring queue for one dialect. Thread-safe: it holds no connection, only
    the process's pending pop claims (see the module docstring)."""

    layout = "ring"

    def __init__(self, spec: QueueSpec, dialect: Dialect) -> None:
        if spec.options.capacity is None:
            raise InvalidSpec(
                f"queue {spec.table!r}: a ring queue needs QueueOptions(capacity=...), the "
                f"number of slots its table holds"
            )
        self.capacity: int = spec.options.capacity
        self._sequences = dialect.supports_writable_cte
        super().__init__(spec, dialect)
        self._claims = _Claims()

    def _params(self) -> dict[str, Any]:
        return {"capacity": self.capacity}

    # -- push ---------------------------------------------------------------------------------

    @staticmethod
    def _fifo_only(priority: int, delay: dt.timedelta | None, run_at: dt.datetime | None) -> None:
        if priority != 0 or isinstance(priority, bool):
            raise InvalidArgument(
                f"a ring queue delivers in push order: it has no priorities (got priority="
                f"{priority!r}); use a split queue (Django: QueueModel, SQLAlchemy: "
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
    ) -> int:
        """Enqueue one message in the executor's transaction; return its number (its id).

        Waits up to ``push_timeout`` for a free slot, then raises QueueFull.
        """
        self._fifo_only(priority, delay, run_at)
        ids = self._push_all(ex, [self.codec.encode(payload)])
        self._wake(ex)
        return ids[0]

    def push_many(
        self,
        ex: Executor,
        rows: Iterable[Mapping[str, Any]],
        *,
        priority: int = 0,
        delay: dt.timedelta | None = None,
        run_at: dt.datetime | None = None,
        batch_size: int | None = None,
    ) -> list[int]:
        """Enqueue many messages, one statement per batch; return their numbers in input order.

        Every row is validated before the first statement runs. A batch larger than the free
        slots waits for poppers like a single push; if the ring stays full, QueueFull says
        which messages were pushed (outside a transaction those are committed).
        """
        self._fifo_only(priority, delay, run_at)
        encoded = [self.codec.encode(row) for row in rows]
        size = positive("batch_size", batch_size, self.spec.options.push_many_batch)
        ids: list[int] = []
        for start in range(0, len(encoded), size):
            try:
                ids.extend(self._push_all(ex, encoded[start : start + size]))
            except QueueFull as exc:
                rest = len(encoded) - len(ids) - len(exc.pushed)
                pushed = [*ids, *exc.pushed, *([None] * rest)]
                raise QueueFull(
                    self.spec.table, self.capacity, pushed, "after waiting push_timeout"
                ) from None
        if ids:
            self._wake(ex)
        return ids

    def _push_all(self, ex: Executor, rows: list[list[Any]]) -> list[int]:
        """Push every row, waiting for free slots (backpressure) up to push_timeout.

        A number whose slot is empty but laps behind it (the numbers in between went to
        pushers that died, rolled back or gave up on a full ring) is written over the gap
        once this pusher has held it for hole_timeout: every number in between was handed
        out before it, so their pushers had longer than that, the hole rule of the pops. The
        alternative, waiting for poppers to mark those holes one lap at a time, left a
        drained ring refusing pushes (QueueFull on an empty ring) and every refused push
        burned one more number.
        """
        ids: list[int | None] = [None] * len(rows)
        # (row index, number or None for a new one, when this pusher took the number)
        pending: list[tuple[int, int | None, float]] = [(i, None, 0.0) for i in range(len(rows))]
        deadline = time.monotonic() + self.spec.options.push_timeout.total_seconds()
        hole_timeout = self._hole_timeout
        jumps: set[int] = set()
        pause = _WAIT_FIRST
        while pending:
            batch = [(number, rows[i]) for i, number, _ in pending]
            outcomes = self._attempt(ex, batch, jumps)
            now = time.monotonic()
            waiting: list[tuple[int, int | None, float]] = []
            behind: dict[int, int] = {}  # slot -> the lowest number allowed to jump into it
            for (i, old, since), (outcome, number) in zip(pending, outcomes, strict=True):
                if outcome == _LANDED:
                    ids[i] = number
                elif outcome == _RENEW or number is None:
                    waiting.append((i, None, 0.0))
                else:
                    taken = since if old == number else now
                    waiting.append((i, number, taken))
                    if outcome == _BEHIND and now - taken >= hole_timeout:
                        slot = number % self.capacity
                        behind[slot] = min(behind.get(slot, number), number)
            jumps = set(behind.values())
            if any(number is not None for _, number, _ in waiting) or (
                waiting and not self._sequences
            ):
                may_wait = self._may_wait(ex)
                if time.monotonic() >= deadline or not may_wait:
                    why = (
                        "after waiting push_timeout"
                        if may_wait
                        else "and SQLite cannot wait inside a transaction (no popper can run "
                        "while it holds the write lock)"
                    )
                    raise QueueFull(self.spec.table, self.capacity, ids, why)
                # The executor's own sleep where it has one: under SQLAlchemy's asyncio
                # (run_sync) a time.sleep would stop the event loop for the whole wait.
                getattr(ex, "sleep", time.sleep)(pause)
                pause = min(pause * 2, _WAIT_MAX)
            pending = waiting
        return [n for n in ids if n is not None]

    def _attempt(
        self, ex: Executor, batch: list[tuple[int | None, list[Any]]], jumps: set[int]
    ) -> list[tuple[str, int | None]]:
        """One push attempt; inside the caller's transaction (PostgreSQL), in a savepoint that
        is rolled back unless every row landed.

        A push whose UPDATE waited for a concurrent writer of its slot (a hole marker, the
        sweeper) and then failed its recheck still holds that row's lock: READ COMMITTED locks
        the newest version before rechecking. In the caller's transaction the lock would last
        until it ends, and the slot's next pusher would block inside PostgreSQL, past its
        push_timeout. Rolling back to the savepoint releases it; rows that had landed are
        pushed again under the same numbers (their slots are free for them again).
        """
        if not (self._sequences and ex.in_transaction()):
            return self._try_push(ex, batch, jumps)
        outcomes: list[tuple[str, int | None]] = []
        with contextlib.suppress(_Rollback), ex.atomic():
            outcomes = self._try_push(ex, batch, jumps)
            if all(outcome == _LANDED for outcome, _ in outcomes):
                return outcomes
            raise _Rollback
        return [(_WAIT if o == _LANDED else o, n) for o, n in outcomes]

    def _may_wait(self, ex: Executor) -> bool:
        # With sequences (PostgreSQL) poppers on other connections free slots while this push
        # waits, even inside a transaction; SQLite's single writer would be this transaction.
        return self._sequences or not ex.in_transaction()

    def _try_push(
        self,
        ex: Executor,
        batch: list[tuple[int | None, list[Any]]],
        jumps: set[int] | frozenset[int] = frozenset(),
    ) -> list[tuple[str, int | None]]:
        """One attempt at each (number or None, encoded row): landed, wait or behind (same
        number) or renew (the number was given up on: take a new one). Numbers in ``jumps``
        may be written over a slot that is empty but laps behind them."""
        if not self._sequences:
            return self._try_push_serial(ex, batch)
        common = {"jumps": sorted(jumps)}
        if len(batch) == 1:
            number, values = batch[0]
            params = dict(zip(self._param_names, values, strict=True), p=number, **common)
            rows = self._run(ex, "push", params)
        else:
            params = {"ps": [number for number, _ in batch], **common}
            for i, column in enumerate(zip(*(values for _, values in batch), strict=True)):
                params[f"c{i}"] = list(column)
            rows = self._run(ex, "push_many", params)
        return [self._push_outcome(int(r[0]), bool(r[1]), r[2], r[3]) for r in rows]

    def _push_outcome(
        self, number: int, landed: bool, slot_seq: int | None, slot_state: int | None
    ) -> tuple[str, int]:
        if landed:
            return _LANDED, number
        if slot_seq is None or slot_seq % self.capacity != number % self.capacity:
            raise self._mismatch(f"slot {number % self.capacity} holds number {slot_seq}")
        if slot_seq >= number:
            return _RENEW, number
        if slot_state == 0 and slot_seq < number - self.capacity:
            return _BEHIND, number
        return _WAIT, number

    def _try_push_serial(
        self, ex: Executor, batch: list[tuple[int | None, list[Any]]]
    ) -> list[tuple[str, int | None]]:
        # SQLite: the whole batch in one transaction, or (the ring is full) nothing of it.
        landed: list[int] = []
        with contextlib.suppress(_Rollback), ex.atomic():
            for _, values in batch:
                params = dict(zip(self._param_names, values, strict=True), **self._clock())
                rows = self._run(ex, "push", params)
                if not rows:
                    self._check_slot(ex)
                    raise _Rollback
                landed.append(int(rows[0][0]))
        if len(landed) < len(batch):
            return [(_WAIT, None)] * len(batch)
        return [(_LANDED, n) for n in landed]

    def _check_slot(self, ex: Executor) -> None:
        number, slot_seq = self._run(ex, "next_slot", {})[0]
        if slot_seq is None or slot_seq % self.capacity != number % self.capacity:
            raise self._mismatch(f"slot {number % self.capacity} holds number {slot_seq}")

    def _mismatch(self, detail: str) -> RingCapacityMismatch:
        return RingCapacityMismatch(
            f"ring queue {self.spec.table!r} declares capacity {self.capacity} but its table "
            f"does not match ({detail}). Changing capacity needs a migration (Django: "
            f"makemigrations + migrate while the ring is empty); see the ring queue docs"
        )

    # -- pop ----------------------------------------------------------------------------------

    def _take(
        self, ex: Executor, operation: str, n: int, params: dict[str, Any]
    ) -> tuple[int, list[Message]]:
        """On PostgreSQL the pops work through claims (see the module docstring).

        Claims whose numbers turn out dead (holes, numbers refused pushes burned, slots moved
        past them) make room for more: the pop claims again at once, until it has ``n``
        messages or claimed nothing dead, so a popper walks past a run of dead numbers in one
        call instead of returning empty-handed once per ``n`` of them.
        """
        if not self._sequences:
            rows = self._run(ex, operation, params)
            return 0, sorted(self._messages(rows), key=lambda m: m.id)
        acked, messages, dead = self._take_once(ex, operation, n, params)
        while dead and len(messages) < n:
            rest = n - len(messages)
            again = "pop_remove" if operation == "pop_remove" else "pop_leased"
            _, taken, dead = self._take_once(ex, again, rest, {**params, "n": rest})
            messages.extend(taken)
        return acked, messages

    def _take_once(
        self, ex: Executor, operation: str, n: int, params: dict[str, Any]
    ) -> tuple[int, list[Message], int]:
        """One pop statement: the count acked, the messages taken, how many claims were dead."""
        active, parked = self._claims.take(n)
        claims = {c.number: c for c in (*active, *parked)}
        params = {**params, "k": n - len(active), "held": list(claims)}
        try:
            rows = self._run(ex, operation, params)
        except BaseException:
            # Numbers the failed statement took are lost with it: their messages strand and
            # the sweeper pushes them again.
            self._claims.give_back(claims.values())
            raise
        acked = 0
        if operation == "ack_pop":
            acked = int(rows[0][0])
            rows = [r[1:] for r in rows if r[1] is not None]
        return acked, *self._settle(ex, rows, claims)

    def _settle(
        self, ex: Executor, rows: list[Row], claims: dict[int, _Claim]
    ) -> tuple[list[Message], int]:
        """Messages from a pop's rows, and how many claims were dead; claims whose message has
        not landed are kept."""
        now = time.monotonic()
        keep: list[_Claim] = []
        taken: list[Row] = []
        missing = False
        dead = 0
        for row in rows:
            number, slot_seq, slot_state = int(row[0]), row[1], row[2]
            if row[3] is not None:
                taken.append(row[3:])
                continue
            if slot_seq is None or slot_seq % self.capacity != number % self.capacity:
                missing = True
                continue
            if slot_seq > number or (slot_seq == number and slot_state != 1):
                dead += 1  # taken by another popper, moved by the sweeper, or marked a hole
                continue
            claim = claims.get(number) or _Claim(number, now)
            # Landed but beyond n: stays active. Not landed yet: parked.
            claim.parked = slot_seq != number
            keep.append(claim)
        stale = [c.number for c in keep if c.parked and now - c.since >= self._hole_timeout]
        if stale:
            marked = {int(r[0]) for r in self._run(ex, "mark_holes", {"held": stale})}
            keep = [c for c in keep if c.number not in marked]
            dead += len(marked)
        self._claims.give_back(keep)
        if missing:
            raise self._mismatch("a claimed slot is missing or holds another slot's numbers")
        return self._messages(taken), dead

    @property
    def _hole_timeout(self) -> float:
        return self.spec.options.hole_timeout.total_seconds()

    def _messages(self, rows: list[Row]) -> list[Message]:
        t = self.dialect.time_result
        decode = self.codec.decode
        return [
            Message(int(r[0]), r[1], 0, t(r[2]), t(r[3]), t(r[2]), r[4], decode(r, 5))  # type: ignore[arg-type]
            for r in rows
        ]

    @property
    def pending_claims(self) -> int:
        """How many pop numbers this process holds whose message has not landed yet."""
        return len(self._claims)

    # -- administration -----------------------------------------------------------------------

    def set_priority(self, ex: Executor, ids: Iterable[TokenLike] | int, priority: int) -> int:
        """Ring queues have no priorities: always raises InvalidArgument."""
        raise InvalidArgument(
            f"ring queue {self.spec.table!r} delivers in push order; it has no priorities"
        )

    def rescue(self, ex: Executor, *, batch: int | None = None) -> RescueResult:
        """The sweeper: expired leases and ended back-offs pushed again (failed after
        ``max_attempts``), stranded messages pushed again, holes marked. Small batches, one
        sweeper per queue at a time."""
        size = positive("batch", batch, self.spec.options.rescue_batch)
        options = self.spec.options
        ready = failed = holes = 0
        params: dict[str, Any] = {
            "n": size,
            "max_attempts": options.max_attempts,
            "lock_key": self.spec.lock_key,
            "error": RESCUE_ERROR,
            "stranded_after": options.stranded_after,
        }
        while True:
            if self._sequences:
                row = self._run(ex, "sweep", params)[0]
                moved, buried, victims = int(row[0]), int(row[1]), int(row[2])
            else:
                moved, buried, victims = self._sweep_serial(ex, {**params, **self._clock()})
            ready += moved
            failed += buried
            if victims < size or moved + buried == 0:
                break
        if self._sequences:
            params = {"lock_key": self.spec.lock_key, "hole_timeout": options.hole_timeout}
            holes = len(self._run(ex, "sweep_holes", params))
        return RescueResult(ready, failed, holes)

    def _sweep_serial(self, ex: Executor, params: dict[str, Any]) -> tuple[int, int, int]:
        # SQLite: victim by victim in one transaction (it runs in-process: no round trips).
        moved = buried = 0
        with ex.atomic():
            victims = self._run(ex, "victims", params)
            for slot, dead in victims:
                if dead:
                    buried += len(self._run(ex, "bury", {**params, "src": slot}))
                else:
                    moved += len(self._run(ex, "move", {**params, "src": slot}))
        return moved, buried, len(victims)

    def stats(self, ex: Executor) -> QueueStats:
        """Counts per state (``scheduled``: waiting out a back-off), the age of the oldest
        ready message, and the ring's capacity (its slot count in the database)."""
        row = self._run(ex, "stats", self._clock())[0]
        t = self.dialect.time_result
        oldest, now = t(row[6]), t(row[7])
        age = None if oldest is None or now is None else max(now - oldest, ZERO)
        ready, scheduled, leased, expired, done, failed = (int(v or 0) for v in row[:6])
        return QueueStats(ready, scheduled, leased, expired, done, failed, age, int(row[8]))

    def next_number(self, ex: Executor) -> int:
        """The first number above every number the counters handed out: where a capacity
        change numbers the new slots on from. The ``stats`` statement reads both counters
        (its last two columns); the pop counter may run a little ahead of the push counter,
        so the larger one is taken."""
        row = self._run(ex, "stats", self._clock())[0]
        return max(int(row[-2]), int(row[-1]))

    def check_empty(self, ex: Executor, *, drain_hint: str) -> None:
        """Raise :class:`~dbqueue.errors.RingNotEmpty` unless the ring holds no message
        (ready, leased or waiting to be retried; the failed table does not count), saying how
        to drain it (``drain_hint``, in the front end's own terms)."""
        stats = self.stats(ex)
        held = stats.ready + stats.leased + stats.scheduled
        if held:
            raise RingNotEmpty(
                f"ring queue {self.spec.table!r} holds {held} message(s) ({stats.ready} ready, "
                f"{stats.leased} leased, {stats.scheduled} waiting to be retried): its "
                f"{stats.capacity} slots can only be replaced (a capacity change) while it is "
                f"empty. Nothing was changed. Drain it first: {drain_hint}"
            )

    def check(self, ex: Executor) -> None:
        """Raise RingCapacityMismatch unless the table has exactly ``capacity`` slots."""
        slots = self.stats(ex).capacity
        if slots != self.capacity:
            raise self._mismatch(f"it has {slots} slots")

    def purge(self, ex: Executor, state: State | str | int | None = None) -> int:
        """Remove every message in ``state`` (every message if None); return how many.
        ``ready`` empties full slots, ``leased`` leased ones, ``failed`` the failed table."""
        value = None if state is None else State.parse(state)
        removed = 0
        with ex.atomic():
            if value in (None, State.READY, State.LEASED):
                slot_state = PURGE_SLOT_STATES.get(value)  # type: ignore[arg-type]
                removed += len(self._run(ex, "purge", {"slot_state": slot_state}))
            if value in (None, State.FAILED):
                removed += len(self._run(ex, "purge_failed", {}))
        return removed

    def delete(self, ex: Executor, ids: Iterable[TokenLike] | int) -> int:
        """Remove messages by number, wherever they are (a slot, the failed table)."""
        numbers = self._ids(ids)
        if not numbers:
            return 0
        params = {"ids": self.dialect.array(numbers)}
        with ex.atomic():
            freed = self._run(ex, "delete", params)
            return len(freed) + len(self._run(ex, "delete_failed", params))

    def retry(self, ex: Executor, ids: Iterable[TokenLike] | int) -> int:
        """Failed messages pushed again at the tail, attempts reset; return how many. Those
        that find no free slot (a full ring) stay failed."""
        numbers = self._ids(ids)
        if not numbers:
            return 0
        if self._sequences:
            return len(self._run(ex, "retry", {"ids": self.dialect.array(numbers)}))
        moved = 0
        with ex.atomic():
            for number in sorted(numbers):
                moved += len(self._run(ex, "retry_one", {"id": number, **self._clock()}))
        return moved


class _Rollback(Exception):
    """Raised inside a push attempt's transaction or savepoint to undo it (see _attempt)."""
