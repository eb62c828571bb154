"""The verdict on a pop claim not taken, from its slot as the pop saw it (no database)."""

from __future__ import annotations

import pytest

from dbqueue.ring.claims import Claim, Verdict, judge
from dbqueue.ring.states import PopRow, SlotState

CAPACITY = 8
HOLE_TIMEOUT = 1.0


def _verdict(claim_number: int, slot_seq: int, state: SlotState, age: float) -> Verdict:
    row = PopRow(claim_number, False, slot_seq, int(state), None, None, None, None)
    return judge(row, Claim(claim_number, since=100.0), CAPACITY, HOLE_TIMEOUT, now=100.0 + age)


@pytest.mark.parametrize("state", list(SlotState))
def test_a_slot_past_the_claim_makes_it_dead_at_once(state: SlotState) -> None:
    assert _verdict(10, 18, state, age=0) is Verdict.DEAD


def test_a_slot_holding_the_claim_ready_means_it_landed() -> None:
    assert _verdict(10, 10, SlotState.READY, age=0) is Verdict.LANDED


@pytest.mark.parametrize("state", [SlotState.EMPTY, SlotState.LEASED])
def test_a_slot_holding_the_claim_but_not_ready_means_someone_else_has_it(
    state: SlotState,
) -> None:
    assert _verdict(10, 10, state, age=0) is Verdict.DEAD


@pytest.mark.parametrize("state", list(SlotState))
def test_an_older_message_in_the_slot_keeps_the_claim_pending(state: SlotState) -> None:
    # Leased included: its pusher may be about to move that message aside and write; a claim
    # dropped then would strand the message it waits for.
    assert _verdict(10, 2, state, age=0.5) is Verdict.PENDING


def test_after_hole_timeout_an_empty_slot_is_a_hole_and_a_busy_one_is_given_up() -> None:
    assert _verdict(10, 2, SlotState.EMPTY, age=2) is Verdict.HOLE
    assert _verdict(10, 2, SlotState.LEASED, age=2) is Verdict.DEAD
    assert _verdict(10, 2, SlotState.READY, age=2) is Verdict.DEAD


def test_a_slot_of_another_residue_is_a_mismatch() -> None:
    assert _verdict(10, 3, SlotState.READY, age=0) is Verdict.MISMATCH
