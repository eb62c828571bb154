"""Popping from a ring and settling what was popped: pops through claims (PostgreSQL), ack,
ack_pop, fail and extend, in the slots and in the side table.

The hot pop is one statement: new numbers from the pop sequence, their slots taken where they
hold their message (``ring_pop_leased``, ``ring_pop_remove``, ``ring_ack_pop``). A popper that
holds claims from earlier pops uses the ``_held`` variant of the statement, which also shows
it the slot of each claim it did not take (see :mod:`dbqueue.ring.claims`).

``ack_pop`` is the layout's (:meth:`dbqueue.layout.Layout.ack_pop`): on PostgreSQL one
``ring_ack_pop`` statement, whose ack of a token a pusher moved aside this module completes
(:meth:`RingPop._ack_aside`).

A leased message is normally settled in its slot. A pusher that had to pass it moved it to the
side table with its token, so a settle that does not find a token in the slots looks there, in
a second statement: its snapshot sees a move committed while the first one waited for the
slot. A failed attempt always leaves the ring (ready again at the tail after its back-off, or
failed for good): no slot waits out a back-off.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any, NamedTuple

from dbqueue.arguments import Token
from dbqueue.errors import NotLeased
from dbqueue.executor import Executor, Row, columns_from
from dbqueue.message import Message
from dbqueue.ring.base import PAYLOAD_AT, TAKEN_AT, RingBase
from dbqueue.ring.claims import Claim, Verdict, judge, now
from dbqueue.ring.states import PopRow
from dbqueue.rows import NumberRow, StateRow


class AckPopHead(NamedTuple):
    """The first columns of ``ring_ack_pop``'s rows: what its ack did (the count on every
    row, the numbers on one)."""

    acked: int
    acked_ids: list[int] | None


#: Where ``ring_ack_pop``'s rows have the popped message's columns.
HEAD_WIDTH = len(AckPopHead._fields)


class RingPop(RingBase):
    """The pop and settle half of :class:`~dbqueue.ring.RingQueue`."""

    # -- pop --------------------------------------------------------------------------------

    def _take(
        self, ex: Executor, operation: str, n: int, params: dict[str, Any]
    ) -> tuple[int, list[Message]]:
        """Run a pop (``pop_leased``, ``pop_remove`` or ``ack_pop``); the count acked and the
        messages taken, in number order.

        A claim the hot statement did not take is looked at again at once (the statement
        for held claims shows its slot), and claims found dead (holes, numbers traded for new
        ones, slots moved past) make room for more: the pop goes on until it has ``n``
        messages or has only claims still pending, so a popper walks past a run of dead
        numbers in one call. (A claim misses only while its push is in flight or when its
        number was given up on: rare, so the hot path stays one statement.)
        """
        acked, messages = self._take_all(ex, operation, n, params)
        if not messages and (self.return_now(ex) or self._claims):
            # The ring was empty but messages waited in the side table, due (a retry whose
            # back-off ended, a message put aside): pushed again at the tail, and taken now
            # rather than at the sweeper's next run. Or this pop claimed numbers whose push
            # had not committed when it looked, or the sweeper's return committed after it
            # looked (the push sequence ran ahead): looked at once more, so that a --burst
            # worker does not take a queue for drained while its messages land.
            pop = "pop_remove" if operation == "pop_remove" else "pop_leased"
            messages = self._take_all(ex, pop, n, params)[1]
        return acked, messages

    def _take_all(
        self, ex: Executor, operation: str, n: int, params: dict[str, Any]
    ) -> tuple[int, list[Message]]:
        if not self._sequences:
            rows = self._run(ex, operation, params)
            return 0, self._messages(ex, rows, leased=operation != "pop_remove")
        acked, messages, again = self._take_once(ex, operation, n, params)
        while again and len(messages) < n:
            rest = n - len(messages)
            pop = "pop_remove" if operation == "pop_remove" else "pop_leased"
            _, taken, again = self._take_once(ex, pop, rest, {**params, "n": rest})
            messages.extend(taken)
        return acked, sorted(messages, key=lambda m: m.id)

    def _take_once(
        self, ex: Executor, operation: str, n: int, params: dict[str, Any]
    ) -> tuple[int, list[Message], int]:
        """One pop statement: the count acked, the messages taken, and how many claims call
        for another look (dead ones, and those the hot statement did not look at)."""
        held = self._claims.take()
        if held:
            active = sum(1 for c in held if not c.parked)
            statement = f"{operation}_held"
            params = {**params, "k": max(0, n - active), "held": [c.number for c in held]}
        else:
            statement, params = operation, {**params, "k": n}
        try:
            rows = self._run(ex, statement, params)
        except BaseException:
            # Numbers the failed statement took are lost with it: their messages strand and
            # are put aside to be pushed again.
            self._claims.give_back(held)
            raise
        acked = 0
        if operation == "ack_pop":
            heads = [AckPopHead._make(r[:HEAD_WIDTH]) for r in rows]
            acked = int(heads[0].acked)
            if acked < len(params["ids"]):  # a pusher moved some of the batch aside
                # acked_ids is on one row (see _then_lease); acked on every row.
                ids = next((h.acked_ids for h in heads if h.acked_ids is not None), None)
                acked += self._ack_aside(ex, params, AckPopHead(acked, ids))
            rows = [columns_from(r, HEAD_WIDTH) for r in rows if r[HEAD_WIDTH] is not None]
        messages = self._messages(ex, rows, leased=operation != "pop_remove")
        return acked, messages, self._keep_claims(ex, rows, held, looked=bool(held))

    def _keep_claims(self, ex: Executor, rows: list[Row], held: list[Claim], looked: bool) -> int:
        """Keep the claims a pop did not take (see dbqueue.ring.claims); how many were dead or
        not looked at."""
        claims = {c.number: c for c in held}
        clock = now()
        keep: list[Claim] = []
        holes: list[int] = []
        again = 0
        mismatch = False
        for r in rows:
            if r[TAKEN_AT]:  # the common case, read before the row is made a PopRow
                continue
            row = PopRow._make(r[:PAYLOAD_AT])
            claim = claims.get(row.number) or Claim(row.number, clock)
            if not looked:  # the hot statement did not look at the slot: the next one does
                keep.append(claim)
                again += 1
                continue
            verdict = judge(row, claim, self.capacity, self._hole_timeout, clock)
            if verdict is Verdict.MISMATCH:
                mismatch = True
            elif verdict is Verdict.DEAD:
                again += 1
            elif verdict is Verdict.HOLE:
                holes.append(claim.number)
                keep.append(claim)
            else:
                claim.parked = verdict is Verdict.PENDING
                keep.append(claim)
        if holes:
            marked = {r.number for r in self._rows(ex, "mark_holes", {"held": holes}, NumberRow)}
            keep = [c for c in keep if c.number not in marked]
            again += len(marked)
        self._claims.give_back(keep)
        if mismatch:
            raise self._mismatch("a claimed slot holds another slot's numbers")
        return again

    @property
    def pending_claims(self) -> int:
        """How many pop numbers this process holds whose message it has not taken yet."""
        return len(self._claims)

    def _ack_aside(self, ex: Executor, params: dict[str, Any], head: AckPopHead) -> int:
        """After ring_ack_pop: ack in the side table the tokens its ack did not find."""
        found = set(head.acked_ids or ())
        rest = [
            (i, a) for i, a in zip(params["ids"], params["attempts"], strict=True) if i not in found
        ]
        if not rest:
            return 0
        return len(self._rows(ex, "ack_side", self._token_params(rest), NumberRow))

    # -- settle -----------------------------------------------------------------------------

    def _settle[R: NumberRow | StateRow](
        self,
        ex: Executor,
        tokens: list[Token],
        once: Callable[[list[Token]], list[R]],
        operation: str,
        strict: bool,
    ) -> list[R]:
        """Settle ``tokens`` with ``once`` (non-strict, in the slots and the side table; rows
        start with the number), and once more for those it did not find: a new statement sees
        a move to the side table that committed while the first waited for a slot. Strict: in
        one transaction, rolled back by :class:`NotLeased` unless every token was found."""

        def all_of() -> list[R]:
            rows = list(once(tokens))
            found = {r.number for r in rows}
            missing = [t for t in tokens if t[0] not in found]
            return rows + list(once(missing)) if missing else rows

        if not strict:
            return all_of()
        with ex.atomic():
            rows = all_of()
            if len(rows) < len(tokens):
                found = {r.number for r in rows}
                raise NotLeased({t[0] for t in tokens if t[0] not in found}, operation)
            return rows

    def _ack_tokens(self, ex: Executor, tokens: list[Token], strict: bool) -> list[int]:
        if strict and self.dialect.supports_writable_cte:
            # The common case in one statement; a token moved aside meanwhile, in a
            # transaction.
            params = self._token_params(tokens)
            acked = [r.number for r in self._rows(ex, "ack_strict", params, NumberRow)]
            if len(acked) == len(tokens):
                return acked

        def once(subset: list[Token]) -> list[NumberRow]:
            return [NumberRow(n) for n in self._in_slots_then_aside(ex, "ack", subset, {})]

        return [int(r.number) for r in self._settle(ex, tokens, once, "ack", strict)]

    def _release_tokens(self, ex: Executor, tokens: list[Token]) -> list[int]:
        """To the side table, ready (see ring_release), then pushed again at the tail."""
        if self.dialect.supports_writable_cte:  # the slots and the side table in one statement
            rows = self._rows(ex, "release", self._token_params(tokens), NumberRow)
            released = [r.number for r in rows]
        else:
            with ex.atomic():
                released = self._in_slots_then_aside(ex, "release", tokens, self._clock())
        if released:
            self.return_now(ex)
        return released

    def _extend_tokens(self, ex: Executor, tokens: list[Token], lease: dt.timedelta) -> list[int]:
        extra = {"lease": lease, **self._clock(lease_until=lease)}
        return self._in_slots_then_aside(ex, "extend", tokens, extra)

    def _in_slots_then_aside(
        self, ex: Executor, operation: str, tokens: list[Token], extra: dict[str, Any]
    ) -> list[int]:
        """Run ``operation`` on the slots, then ``<operation>_side`` for the tokens it did not
        find; the numbers done."""
        done = [
            r.number for r in self._rows(ex, operation, self._params_of(tokens, extra), NumberRow)
        ]
        found = set(done)
        rest = [t for t in tokens if t[0] not in found]
        if rest:
            side = self._rows(ex, f"{operation}_side", self._params_of(rest, extra), NumberRow)
            done += [r.number for r in side]
        return done

    def _params_of(self, tokens: list[Token], extra: dict[str, Any]) -> dict[str, Any]:
        return {**self._token_params(tokens), **extra}

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
        """Fail ``tokens`` (for good if ``final``): PostgreSQL in one statement (both tables,
        strict included; a token moved aside meanwhile, in a transaction); SQLite in the
        slots, then the side table."""
        of = {t[0]: (t, d, e) for t, d, e in zip(tokens, delays, errors, strict=True)}

        def params(subset: list[Token], strict: bool) -> dict[str, Any]:
            ts, ds, es = zip(*(of[t[0]] for t in subset), strict=True)
            fail = self._fail_params(list(ts), list(ds), list(es), final=final)
            return {**fail, "strict": strict}

        if strict and self.dialect.supports_writable_cte:
            rows = self._rows(ex, "fail", params(tokens, True), StateRow)
            if len(rows) == len(tokens):
                return rows

        def once(subset: list[Token]) -> list[StateRow]:
            rows = self._rows(ex, "fail", params(subset, False), StateRow)
            if self.dialect.supports_writable_cte:
                return rows  # the statement looks in both tables
            found = {r.number for r in rows}
            rest = [t for t in subset if t[0] not in found]
            if not rest:
                return rows
            return rows + self._rows(ex, "fail_side", params(rest, False), StateRow)

        return self._settle(ex, tokens, once, "fail", strict)
