"""What every table layout (split, ring) shares: the operations whose logic is the same for
both (pop's reading, ack, fail, extend, release, stats, compaction), over its named statements
(:class:`~dbqueue.statements.Statements`). A layout subclass supplies the statements
(``sql/<dialect>/<layout>.sql``, each named ``<layout>_<operation>``) and the operations that
differ: push, pop, rescue.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Self

from dbqueue.arguments import ZERO, Token, TokenLike, check_count, check_duration, fenced, to_tokens
from dbqueue.codec import Codec
from dbqueue.dialects.base import Dialect
from dbqueue.error_text import storable_error
from dbqueue.errors import (
    InvalidArgument,
    NotLeased,
    TransactionStateError,
    UnsupportedOperation,
    shown,
)
from dbqueue.executor import Executor, Row, UnloadedRow
from dbqueue.message import (
    DeliveryMode,
    Message,
    QueueStats,
    SelectorLike,
    State,
    StateSelector,
)
from dbqueue.rows import NumberRow, StateRow, StatsRow, ValueRow
from dbqueue.spec import QueueSpec
from dbqueue.sql import Statement
from dbqueue.statements import Statements
from dbqueue.unreadable import failed_for_good
from dbqueue.upkeep import compaction
from dbqueue.upkeep.keeper import touch
from dbqueue.upkeep.rounds import Upkeep, UpkeepReport

RESCUE_ERROR = "lease expired: the worker holding it died, or overran its lease"
#: The start of the error a message gets when a pop cannot read it.
UNREADABLE_ERROR = "unreadable: dbqueue could not decode this message"

log = logging.getLogger("dbqueue")


class Layout(Statements):
    """The shared half of a queue layout. Thread-safe: it holds no connection."""

    #: What a queue with consumer groups does as a whole (:attr:`QueueSpec.fans_out`): push
    #: into every group, and what goes with it; the rest is a group's (each layout's own).
    fan_out_operations: frozenset[str] = frozenset()
    #: What a consumer group does not do: a push goes to every group, through the queue.
    push_operations: frozenset[str] = frozenset()

    def __init__(self, spec: QueueSpec, dialect: Dialect) -> None:
        super().__init__(spec, dialect)
        self.codec = Codec(spec, dialect)
        self._param_names = [f"p{i}" for i in range(len(spec.fields))]
        self._upkeep = Upkeep(self)
        self._groups: dict[str, Self] = {}
        #: A consumer group's queue of all the groups (see :meth:`group`), else None.
        self._fan_out: Self | None = None

    def group(self, name: str) -> Self:
        """The queue as consumer group ``name`` sees it (``QueueOptions.groups``): pops, acks,
        fails, retries, rescues, counts and purges of that group's deliveries only. Pushes go
        to the queue itself, which delivers each message to every group. One object per group
        and queue object: it holds no connection either."""
        core = self._groups.get(name)
        if core is None:
            spec = self.spec.for_group(name)  # InvalidArgument for a group not declared
            made = type(self)(spec, self.dialect)
            made._fan_out = self
            # setdefault: threads racing here all end up with the one object.
            core = self._groups.setdefault(name, made)
        return core

    def pushing_queue(self) -> Self:
        """The queue whose pushes reach this one's consumers: for a consumer group, the queue
        of all its groups; else itself."""
        return self._fan_out or self

    def _statement(self, operation: str) -> Statement:
        if self.spec.options.groups:
            self._check_grouped(operation)
        return super()._statement(operation)

    def _check_grouped(self, operation: str) -> None:
        """UnsupportedOperation for what a queue with consumer groups, or one of its groups,
        does not do: checked before any SQL runs."""
        spec = self.spec
        if spec.fans_out and operation not in self.fan_out_operations:
            raise UnsupportedOperation(
                f"queue {spec.table!r} delivers each item to each of its consumer groups "
                f"({', '.join(spec.options.groups)}), and each group pops, acks, counts and "
                f"purges its own deliveries: do this on one group, queue.group(name)"
            )
        if spec.group is not None and operation in self.push_operations:
            raise UnsupportedOperation(
                f"consumer group {spec.group!r} of queue {spec.table!r} does not push: push "
                f"to the queue, which delivers the item to every group"
            )

    # -- popped messages as the fronts' model instances --------------------------------------

    def model_row(self, message: Message) -> dict[str, Any]:
        """The columns of the declared model's table for a popped message, by column name
        (the fronts build their model instances from it)."""
        raise NotImplementedError

    def model_extras(self, message: Message) -> dict[str, Any]:
        """What a popped message has beyond its model's columns, by attribute name (the
        fronts set these on the instance)."""
        raise NotImplementedError

    # -- stats --------------------------------------------------------------------------------

    def _stats(self, ex: Executor) -> QueueStats:
        """The queue's counts from its ``stats`` statement (:class:`~dbqueue.rows.StatsRow`)."""
        (row,) = self._rows(ex, "stats", self._clock(), StatsRow)
        t = self.dialect.time_result
        oldest, now = t(row.oldest_ready), t(row.now)
        age = None if oldest is None or now is None else max(now - oldest, ZERO)
        ready, scheduled, leased, expired, done, failed = (int(v or 0) for v in row[:6])
        slots = None if row.slots is None else int(row.slots)
        in_slots = None if slots is None else int(row.in_slots or 0)
        spilled = None if slots is None else int(row.spilled or 0)
        return QueueStats(
            ready, scheduled, leased, expired, done, failed, age, slots, in_slots, spilled,
            int(row.cancelled or 0),
        )  # fmt: skip

    # -- purge and count ------------------------------------------------------------------------

    def _selection(
        self, state: SelectorLike | None, older_than: dt.timedelta | None
    ) -> dict[str, Any]:
        """The parameters of the statements that take the items of ``state`` (None: every
        item) older than ``older_than`` (None: any age): the ``_purged`` fragments."""
        selector = None if state is None else StateSelector.parse(state)
        if older_than is not None:
            check_duration("older_than", older_than, zero=True)
        params: dict[str, Any] = {
            "state": None if selector is None else int(selector.state),
            "due": None if selector is None else selector.due,
            **self._slot_selection(selector),
        }
        if not self.dialect.client_clock:
            return {**params, "older_than": older_than}
        if older_than is None:
            return {**params, **self._clock(), "before": None}
        return {**params, **self._clock(before=-older_than)}

    def _slot_selection(self, selector: StateSelector | None) -> dict[str, Any]:
        """What a layout's own tables add to :meth:`_selection` (a ring's slots)."""
        return {}

    def purge(
        self,
        ex: Executor,
        state: SelectorLike | None = None,
        *,
        older_than: dt.timedelta | None = None,
    ) -> int:
        """Delete the items of ``state`` (a :class:`~dbqueue.message.StateSelector` or its
        name: "ready" the items due now, "scheduled" those due later; None: every item), only
        those older than ``older_than`` if given (see StateSelector); return how many."""
        return self._purge(ex, self._selection(state, older_than))

    def _purge(self, ex: Executor, params: dict[str, Any]) -> int:
        """Run the layout's purge (the ``_selection`` parameters); how many were deleted."""
        return len(self._run(ex, "purge", params))

    def count(
        self,
        ex: Executor,
        state: SelectorLike | None = None,
        *,
        older_than: dt.timedelta | None = None,
    ) -> int:
        """How many items :meth:`purge` would delete now with the same arguments."""
        params = self._selection(state, older_than)
        return int(self._rows(ex, "count", params, ValueRow)[0].value)

    # -- arguments ----------------------------------------------------------------------------

    def _lease(self, lease: dt.timedelta | None) -> dt.timedelta:
        if lease is None:
            return self.spec.options.lease
        return check_duration("lease", lease, zero=False)

    def _check_mode(self, ex: Executor, mode: DeliveryMode | str) -> DeliveryMode:
        """Parse ``mode`` and check the transaction state its guarantee needs."""
        mode = DeliveryMode.parse(mode)
        in_tx = ex.in_transaction()
        if mode is DeliveryMode.AT_MOST_ONCE and in_tx:
            raise TransactionStateError(
                "pop_batch(mode='at_most_once') must commit on its own, but a transaction is "
                "open: a rollback would bring back items already handed out. Call it outside "
                "the transaction, or use mode='transactional'"
            )
        if mode is DeliveryMode.TRANSACTIONAL and not in_tx:
            raise TransactionStateError(
                "pop_batch(mode='transactional') needs an open transaction (Django: inside "
                "transaction.atomic()); outside one it would commit at once like at_most_once"
            )
        return mode

    def _ids(self, ids: Iterable[TokenLike] | int) -> list[int]:
        return [t[0] for t in to_tokens(ids)]

    # -- pop --------------------------------------------------------------------------------

    def _read_each(
        self,
        ex: Executor,
        rows: Iterable[Row],
        read: Callable[[Row], Message],
        token: Callable[[Row], Token],
        *,
        leased: bool,
    ) -> list[Message]:
        """The messages of a pop's rows, each read on its own: one that cannot be (a payload
        written outside dbqueue, nested too deep to decode; a value of the wrong type) does
        not take the batch down with it. Leased, it is failed for good at once with what went
        wrong (no retry would read it better); popped without a lease it is already gone, and
        logged."""
        messages: list[Message] = []
        unreadable: list[tuple[Token, str]] = []
        for r in rows:
            if isinstance(r, UnloadedRow):  # the driver could not load some of its values
                unreadable.append((token(r), f"{UNREADABLE_ERROR}: {'; '.join(r.errors)}"))
                continue
            try:
                messages.append(read(r))
            except Exception as exc:  # whatever the row made the decoder raise
                unreadable.append((token(r), f"{UNREADABLE_ERROR}: {type(exc).__name__}: {exc}"))
        for (number, _), error in unreadable:
            log.error(
                "queue %r: message %s %s: %s", self.spec.table, number,
                "failed for good" if leased else "dropped (popped without a lease)", error,
            )  # fmt: skip
        if unreadable and leased:
            tokens = [t for t, _ in unreadable]
            errors = [storable_error(e) for _, e in unreadable]
            rows = self._fail_tokens(ex, tokens, [ZERO] * len(tokens), errors, False, final=True)
            failed_for_good(len(rows))  # the caller never sees them (dbqueue.unreadable)
        return messages

    def _take(
        self, ex: Executor, operation: str, n: int, params: dict[str, Any]
    ) -> tuple[int, list[Message]]:
        """Run a pop statement (``pop_leased``, ``pop_remove`` or ``ack_pop``); return the
        count its ack removed (0 for the pops) and the messages taken, in delivery order."""
        raise NotImplementedError

    def pop_batch(
        self,
        ex: Executor,
        n: int = 1,
        *,
        mode: DeliveryMode | str = DeliveryMode.AT_LEAST_ONCE,
        lease: dt.timedelta | None = None,
    ) -> list[Message]:
        """Take up to ``n`` items in the layout's delivery order (split: priority, then run_at,
        then id; ring: push order) in the given :class:`~dbqueue.message.DeliveryMode`.

        The queue's upkeep rounds then run in the background of this process unless another
        thread runs them (a worker's): see :mod:`dbqueue.upkeep.keeper`."""
        check_count("pop_batch", n)
        lease = self._lease(lease)
        touch(self, ex)
        if DeliveryMode.parse(mode) is DeliveryMode.AT_LEAST_ONCE:
            params = {"n": n, "lease": lease, **self._clock(lease_until=lease)}
            return self._take(ex, "pop_leased", n, params)[1]
        self._check_mode(ex, mode)
        return self._take(ex, "pop_remove", n, {"n": n, **self._clock()})[1]

    def ack_pop(
        self,
        ex: Executor,
        items: TokenLike,
        n: int,
        *,
        lease: dt.timedelta | None = None,
    ) -> tuple[int, list[Message]]:
        """Ack ``items`` (those still leased under their token, as ``strict=False``) and lease
        up to ``n`` more, in one transaction: a worker's loop with one commit per batch.

        Returns how many items were acked and the newly leased messages. With data-modifying
        CTEs (PostgreSQL) this is one statement (``<layout>_ack_pop``): half the round trips
        and commits of ack + pop.
        """
        check_count("ack_pop", n)
        lease = self._lease(lease)
        touch(self, ex)
        tokens = fenced(items, "ack_pop")
        if not tokens:
            return 0, self.pop_batch(ex, n, lease=lease)
        if not self.dialect.supports_writable_cte:
            # No <layout>_ack_pop statement here: the ack and the pop, in one transaction.
            with ex.atomic():
                acked = self.ack(ex, tokens, strict=False)
                return len(acked), self.pop_batch(ex, n, lease=lease)
        params = {**self._token_params(tokens), "strict": False, "n": n, "lease": lease}
        return self._take(ex, "ack_pop", n, params)

    # -- acknowledge, fail, extend ------------------------------------------------------------

    def _token_params(self, tokens: list[Token], *extra: Sequence[Any]) -> dict[str, Any]:
        if self.dialect.supports_array_params:
            return {
                "ids": [t[0] for t in tokens],
                "attempts": [t[1] for t in tokens],
                "count": len(tokens),
            }
        rows = [[*t, *(column[i] for column in extra)] for i, t in enumerate(tokens)]
        return {"tokens": self.dialect.array(rows), "count": len(tokens)}

    def _check_leased(
        self, ex: Executor, tokens: list[Token], done: list[int], operation: str
    ) -> None:
        """Raise NotLeased unless a strict operation found every token (``done``: the ids it
        settled)."""
        if len(done) == len(tokens):
            return
        rows = self._rows(ex, "not_leased", self._token_params(tokens), NumberRow)
        bad = {int(r.number) for r in rows} or ({t[0] for t in tokens} - set(done))
        raise NotLeased(bad, operation)

    def ack(self, ex: Executor, items: TokenLike, *, strict: bool = True) -> list[int]:
        """Remove leased items after their work is done (a split queue with ``keep_done``
        marks them done instead); return the ids acked, in ascending order (a statement's
        RETURNING order is the order it met the rows: a ring's slot order wraps around).

        ``strict`` (default): if any item is not leased under its token, raise
        :class:`NotLeased` and change nothing. ``strict=False`` acks what still matches.
        """
        tokens = fenced(items, "ack")
        if not tokens:
            return []
        return sorted(self._ack_tokens(ex, tokens, strict))

    def ack_by_id(self, ex: Executor, ids: Iterable[TokenLike] | int) -> list[int]:
        """Operator's ack: settle leased items by id, whichever delivery holds them now (not
        fenced: a consumer acks what it popped with :meth:`ack`); return the ids acked."""
        tokens: list[Token] = [(i, None) for i in self._ids(ids)]
        if not tokens:
            return []
        return sorted(self._ack_tokens(ex, tokens, False))

    def _ack_tokens(self, ex: Executor, tokens: list[Token], strict: bool) -> list[int]:
        """Ack ``tokens`` (at least one); the ids acked, in any order."""
        # The clock only where the statement reads it: a keep_done ack records when it finished.
        clock = self._clock() if self.spec.options.keep_done else {}
        params = {**self._token_params(tokens), "strict": strict, **clock}
        acked = [int(r.number) for r in self._rows(ex, "ack", params, NumberRow)]
        if strict:
            self._check_leased(ex, tokens, acked, "ack")
        return acked

    def fail(
        self,
        ex: Executor,
        items: TokenLike,
        error: str | Sequence[str],
        *,
        delay: dt.timedelta | None = None,
        strict: bool = True,
        retry: bool = True,
    ) -> dict[int, State]:
        """Record a failed attempt: ready again after the back-off, or failed for good once
        ``max_attempts`` is reached, or at once with ``retry=False`` (an error no retry can
        mend). Returns each item's new state."""
        return self._fail(ex, fenced(items, "fail"), error, delay, strict, final=not retry)

    def fail_by_id(
        self, ex: Executor, ids: Iterable[TokenLike] | int, error: str | Sequence[str]
    ) -> dict[int, State]:
        """Operator's fail: record a failed attempt of leased items by id, whichever delivery
        holds them now (not fenced: a consumer fails what it popped with :meth:`fail`).
        Returns each item's new state."""
        return self._fail(ex, [(i, None) for i in self._ids(ids)], error, None, False)

    def _fail(
        self,
        ex: Executor,
        tokens: list[Token],
        error: str | Sequence[str],
        delay: dt.timedelta | None,
        strict: bool,
        *,
        final: bool = False,
    ) -> dict[int, State]:
        if isinstance(error, str):
            errors = [error] * len(tokens)
        elif isinstance(error, bytes | bytearray | Mapping) or not hasattr(error, "__iter__"):
            raise InvalidArgument(
                f"fail() needs one error string, or one per item; got {shown(error)}"
            )
        else:
            errors = list(error)
        if len(errors) != len(tokens) or not all(isinstance(e, str) for e in errors):
            raise InvalidArgument("fail() needs one error string, or one per item")
        if delay is not None:
            check_duration("delay", delay, zero=True)
        if not tokens:
            return {}
        backoff = self.spec.options.backoff
        delays = [delay if delay is not None else backoff.delay(t[1] or 1) for t in tokens]
        errors = [storable_error(e) for e in errors]
        rows = self._fail_tokens(ex, tokens, delays, errors, strict, final=final)
        return {int(r.number): State(r.state) for r in rows}

    def _fail_tokens(
        self,
        ex: Executor,
        tokens: list[Token],
        delays: list[dt.timedelta],
        errors: list[str],
        strict: bool,
        *,
        final: bool = False,
    ) -> list[StateRow]:
        """Fail ``tokens`` (each with its back-off delay and error text; for good if
        ``final``); their new states."""
        params = {**self._fail_params(tokens, delays, errors, final=final), "strict": strict}
        rows = self._rows(ex, "fail", params, StateRow)
        if strict:
            self._check_leased(ex, tokens, [r.number for r in rows], "fail")
        return rows

    def _fail_params(
        self,
        tokens: list[Token],
        delays: list[dt.timedelta],
        errors: list[str],
        *,
        final: bool = False,
    ) -> dict[str, Any]:
        # Failed for good once attempts >= max_attempts: always, with 0.
        limit = 0 if final else self.spec.options.max_attempts
        common = {"max_attempts": limit, **self._clock()}
        if self.dialect.supports_array_params:
            return {**self._token_params(tokens), "delays": delays, "errors": errors, **common}
        now = dt.datetime.now(dt.UTC)
        run_ats = [self.dialect.time_param(now + d) for d in delays]
        return {**self._token_params(tokens, run_ats, errors), **common}

    def release(self, ex: Executor, items: TokenLike) -> list[int]:
        """Hand back leased items unstarted (a worker stopping before it handled them): ready
        again at once, the attempt their pop counted taken back; return the ids released (those
        still leased under their token), in ascending order. The token of a released item
        must not be used again: a split queue's next delivery of it has the same one."""
        tokens = fenced(items, "release")
        if not tokens:
            return []
        released = self._release_tokens(ex, tokens)
        if released:
            self._wake(ex)  # idle workers take them now
        return sorted(released)

    def _release_tokens(self, ex: Executor, tokens: list[Token]) -> list[int]:
        """Release ``tokens`` (at least one); the ids released, in any order."""
        params = {**self._token_params(tokens), **self._clock()}  # a cancelled one's time
        rows = self._rows(ex, "release", params, NumberRow)
        return [int(r.number) for r in rows]

    def next_due(self, ex: Executor) -> dt.datetime | None:
        """When this queue next has work that no push announces: the earliest time an item
        waiting out a delay or a back-off is due, or a lease expires; None if there is none.
        (An idle worker sleeps until then, not until its safety poll.)"""
        (row,) = self._rows(ex, "next_due", {}, ValueRow)
        return self.dialect.time_result(row.value)

    # -- compaction (see dbqueue.upkeep.compaction) -------------------------------------------

    def compact(
        self, ex: Executor, *, lock_timeout: dt.timedelta = compaction.LOCK_TIMEOUT
    ) -> compaction.CompactResult:
        """Rewrite the queue's tables to what some snapshot may still see (VACUUM FULL, once a
        plain VACUUM has shown that copy to be small), giving back what a long transaction
        made them grow by; outside any transaction, trying for up to ``lock_timeout`` to find
        each table free of other statements' locks (a skip is in the result, not raised)."""
        return compaction.compact(self, ex, lock_timeout=lock_timeout)

    def compact_if_grown(self, ex: Executor) -> compaction.CompactResult | None:
        """:meth:`compact` if the tables grew enough since this process last compacted them;
        None if it was not due (:meth:`upkeep` does it, and more)."""
        return compaction.compact_if_grown(self, ex, self._upkeep.growth)

    def upkeep(self, ex: Executor) -> UpkeepReport:
        """A round of the queue's upkeep (:mod:`dbqueue.upkeep`) on ``ex``, a connection with
        no transaction open: a split queue's heads advanced, its tables compacted if they
        grew. Whoever consumes the queue runs one every ``CHECK_EVERY`` seconds on a
        connection of its own (a worker's maintenance thread; the keeper of API
        consumers)."""
        return self._upkeep.run(ex)

    def extend(
        self, ex: Executor, items: TokenLike, *, lease: dt.timedelta | None = None
    ) -> list[int]:
        """Push the leases of items still held further out; return the ids extended."""
        tokens = fenced(items, "extend")
        if not tokens:
            return []
        lease = self._lease(lease)
        return self._extend_tokens(ex, tokens, lease)

    def _extend_tokens(self, ex: Executor, tokens: list[Token], lease: dt.timedelta) -> list[int]:
        """Extend the leases of ``tokens`` (at least one); the ids extended."""
        params = {**self._token_params(tokens), "lease": lease, **self._clock(lease_until=lease)}
        return [int(r.number) for r in self._rows(ex, "extend", params, NumberRow)]

    def delete(self, ex: Executor, ids: Iterable[TokenLike] | int) -> int:
        """Delete items by id, whatever their state; return how many."""
        ids = self._ids(ids)
        if not ids:
            return 0
        return len(self._run(ex, "delete", {"ids": self.dialect.array(ids)}))

    def retry(self, ex: Executor, ids: Iterable[TokenLike] | int) -> int:
        """Failed items back to ready, attempts reset; return how many."""
        ids = self._ids(ids)
        if not ids:
            return 0
        params = {"ids": self.dialect.array(ids), **self._clock()}
        return len(self._run(ex, "retry", params))
