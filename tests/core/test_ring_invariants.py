"""The ring's invariants (docs/explanation/design.md, "The ring layout") under random
interleavings (hypothesis stateful testing).

Clients here are sequential, but every way a real client can stop half-way is a rule: a pusher
that takes a number and dies, a pusher whose write lands late (after its number may have been
given up on), a popper that claims a number and dies, a popper process that dies holding
claims, a transactional pop rolled back, leases expiring, failures, sweeper runs. After every
step each slot's seq is congruent to its slot and only grew by whole laps; at the end, after
draining, every pushed message was delivered (or is in the failed table), no message was
delivered twice by an at-most-once or transactional pop or acknowledged twice, and the ring
still takes and delivers a full lap of new messages: nothing is stuck.

Thirty examples per backend run in the suite; a longer campaign: DBQUEUE_RING_EXAMPLES=1000.
"""

from __future__ import annotations

import os
from collections import Counter
from contextlib import ExitStack
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from dbqueue import Message, QueueFull, RingQueue, State
from tests.core.ringbed import RingBed, ring_bed

POPPERS = 2
CAPACITY = 3


class _RolledBack(Exception):
    """The caller's work failed: its transaction, and the pop in it, roll back."""


class RingMachine(RuleBasedStateMachine):
    """One ring, two popper processes (each a RingQueue with its own claims), many pushers."""

    bed: RingBed

    def __init__(self) -> None:
        super().__init__()
        self.poppers = [self.bed.peer() for _ in range(POPPERS)]
        self.sequences = self.bed.queue.dialect.supports_sequences
        self.next_n = 0
        self.pushed: set[int] = set()
        self.final: Counter[int] = Counter()  # acked, or popped at-most-once / transactionally
        self.leased: dict[int, Message] = {}
        self.late: list[tuple[int, int]] = []  # (push number, payload n) of pushes in flight
        self.seen_seq = {slot: seq for slot, seq, _ in self.bed.slots()}

    # -- pushers ----------------------------------------------------------------------------

    def _payload(self) -> int:
        self.next_n += 1
        return self.next_n

    def _push(self, n: int) -> None:
        try:
            self.bed.queue.push(self.bed.ex, {"n": n})
        except QueueFull:
            return
        self.pushed.add(n)

    @rule()
    def push(self) -> None:
        self._push(self._payload())

    @rule(k=st.integers(2, 4))
    def push_many(self, k: int) -> None:
        ns = [self._payload() for _ in range(k)]
        try:
            self.bed.queue.push_many(self.bed.ex, [{"n": n} for n in ns])
        except QueueFull as full:
            self.pushed.update(n for n, i in zip(ns, full.pushed, strict=True) if i is not None)
            return
        self.pushed.update(ns)

    @precondition(lambda self: self.sequences)
    @rule()
    def pusher_dies_after_taking_a_number(self) -> None:
        self.bed.dead_pusher()

    @precondition(lambda self: self.sequences)
    @rule()
    def pusher_takes_a_number(self) -> None:
        self.late.append((self.bed.dead_pusher(), self._payload()))

    @rule(k=st.integers(1, 3), commit=st.booleans())
    def push_in_a_transaction(self, k: int, commit: bool) -> None:
        """A caller's transaction pushes (never moving another message aside), then commits
        or rolls back (PostgreSQL: its numbers become holes)."""
        ns = [self._payload() for _ in range(k)]
        try:
            with self.bed.transaction():
                self.bed.queue.push_many(self.bed.ex, [{"n": n} for n in ns])
                if not commit:
                    raise _RolledBack
        except (_RolledBack, QueueFull):
            return
        self.pushed.update(ns)

    @precondition(lambda self: self.late)
    @rule()
    def late_pusher_writes(self) -> None:
        number, n = self.late.pop(0)
        q, ex = self.bed.queue, self.bed.ex
        values = q.codec.encode({"n": n})
        (row,) = q._try_hot(ex, [values], [(0, number)], locked=False)
        if row.landed or q._blocked(ex, number, values, evict=True).landed:
            self.pushed.add(n)
        else:  # full, or given up on: the rest of the protocol, as push() does it
            self._push(n)

    # -- poppers ----------------------------------------------------------------------------

    def _delivered(self, messages: list[Message], *, final: bool) -> None:
        for m in messages:
            n = m.payload["n"]
            assert n in self.pushed or any(n == late for _, late in self.late), n
            assert self.final[n] == 0, f"message {n} delivered again after a final delivery"
            if final:
                self.final[n] += 1
                self.leased.pop(n, None)
            else:
                self.leased[n] = m

    @rule(i=st.integers(0, POPPERS - 1), k=st.integers(1, 4))
    def pop_leased(self, i: int, k: int) -> None:
        self._delivered(self.poppers[i].pop_batch(self.bed.ex, k), final=False)

    @rule(i=st.integers(0, POPPERS - 1), k=st.integers(1, 4))
    def pop_at_most_once(self, i: int, k: int) -> None:
        popped = self.poppers[i].pop_batch(self.bed.ex, k, mode="at_most_once")
        self._delivered(popped, final=True)

    @rule(i=st.integers(0, POPPERS - 1), k=st.integers(1, 4), commit=st.booleans())
    def pop_transactional(self, i: int, k: int, commit: bool) -> None:
        try:
            with self.bed.transaction():
                popped = self.poppers[i].pop_batch(self.bed.ex, k, mode="transactional")
                if not commit:
                    raise _RolledBack
        except _RolledBack:
            return
        self._delivered(popped, final=True)

    @precondition(lambda self: self.sequences)
    @rule()
    def popper_dies_after_claiming(self) -> None:
        self.bed.dead_popper()

    @rule(i=st.integers(0, POPPERS - 1))
    def popper_process_dies(self, i: int) -> None:
        self.poppers[i] = self.bed.peer()  # its pending claims die with it

    @precondition(lambda self: self.leased)
    @rule(data=st.data())
    def ack(self, data: Any) -> None:
        chosen = data.draw(st.lists(st.sampled_from(sorted(self.leased)), min_size=1, unique=True))
        messages = [self.leased.pop(n) for n in chosen]
        acked = set(self.bed.queue.ack(self.bed.ex, messages, strict=False))
        for m in messages:
            if m.id in acked:
                self._delivered([m], final=True)

    @precondition(lambda self: self.leased)
    @rule(data=st.data())
    def fail(self, data: Any) -> None:
        n = data.draw(st.sampled_from(sorted(self.leased)))
        self.bed.queue.fail(self.bed.ex, self.leased.pop(n), "boom", strict=False)

    @rule()
    def leases_expire(self) -> None:
        self.bed.expire_leases()

    @rule()
    def sweeper_runs(self) -> None:
        self.bed.queue.rescue(self.bed.ex)

    # -- invariants -------------------------------------------------------------------------

    @invariant()
    def slots_advance_by_whole_laps(self) -> None:
        for slot, seq, _ in self.bed.slots():
            before = self.seen_seq[slot]
            assert seq % CAPACITY == slot, (slot, seq)
            assert seq >= before and (seq - before) % CAPACITY == 0, (slot, before, seq)
            self.seen_seq[slot] = seq

    def drain_and_check(self) -> None:
        """Finish late pushes, then sweep and pop until the ring is empty; check delivery."""
        while self.late:
            self.late_pusher_writes()
        for _ in range(20):
            self.bed.expire_leases()
            self.bed.queue.rescue(self.bed.ex)
            for popper in self.poppers:
                self._delivered(
                    popper.pop_batch(self.bed.ex, 2 * CAPACITY, mode="at_most_once"), final=True
                )
            stats = self.bed.queue.stats(self.bed.ex)
            if stats.ready + stats.leased + stats.scheduled == 0:
                break
        side = self.bed.spec.failed_table
        failed = {int(r[0]) for r in self.bed.raw(f'SELECT n FROM "{side}" WHERE state = 3')}
        lost = self.pushed - set(self.final) - failed
        assert not lost, f"pushed but never delivered: {sorted(lost)}"
        assert not failed & set(self.final), "a failed message was also delivered for good"
        self.nothing_is_stuck()

    def nothing_is_stuck(self) -> None:
        """Two full laps of new messages go through (holes get marked, strands swept)."""
        fresh = {self._payload() for _ in range(2 * CAPACITY)}
        todo = sorted(fresh)
        for _ in range(10 * CAPACITY):
            if todo:
                try:
                    self.bed.queue.push(self.bed.ex, {"n": todo[0]})
                    self.pushed.add(todo.pop(0))
                except QueueFull:
                    pass
            self.bed.queue.rescue(self.bed.ex)
            self._delivered(
                self.poppers[0].pop_batch(self.bed.ex, CAPACITY, mode="at_most_once"), final=True
            )
            if not todo and fresh <= set(self.final):
                return
        state = (self.bed.slots(), self.bed.queue.stats(self.bed.ex),
                 [sorted(p._claims.held) for p in self.poppers],
                 self.bed.raw(f'SELECT last_value FROM "{self.bed.spec.push_seq}"'),
                 self.bed.raw(f'SELECT last_value FROM "{self.bed.spec.pop_seq}"'))  # fmt: skip
        raise AssertionError(
            f"stuck: {sorted(fresh - set(self.final))} never went through: {state}"
        )

    def teardown(self) -> None:
        self.drain_and_check()


MACHINE_BACKENDS = [
    pytest.param("postgresql", marks=pytest.mark.postgresql, id="pg"),
    pytest.param("sqlite", marks=pytest.mark.sqlite, id="sqlite"),
]


@pytest.mark.parametrize("backend", MACHINE_BACKENDS)
def test_ring_invariants_hold_under_random_interleavings(
    backend: str, request: pytest.FixtureRequest, table_name: str
) -> None:
    examples = iter(range(10_000))

    def machine() -> RingMachine:
        stack = ExitStack()
        bed = stack.enter_context(
            ring_bed(
                backend,
                request,
                f"{table_name}_{next(examples)}",
                capacity=CAPACITY,
                max_attempts=3,
            )
        )

        class Bound(RingMachine):
            def teardown(self) -> None:
                try:
                    super().teardown()
                finally:
                    stack.close()

        Bound.bed = bed
        return Bound()

    run_state_machine_as_test(
        machine,  # type: ignore[arg-type]  # a factory is accepted, as the docs say
        settings=settings(
            max_examples=int(os.environ.get("DBQUEUE_RING_EXAMPLES", "30")),
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


def test_the_machine_module_names_states() -> None:
    """Failed messages keep State's numbering (the machine reads the failed table)."""
    assert int(State.FAILED) == 3
    assert RingQueue.layout == "ring"
