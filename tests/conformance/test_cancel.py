"""cancel() and cancel_requested(): a ready or scheduled item never runs; a leased one's
handler is asked to stop, and whatever settles it records it cancelled."""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any

import pytest

from dbqueue import CancelOutcome, State
from dbqueue.errors import InvalidArgument, NotLeased, UnsupportedOperation
from tests.conformance.fronts import PAST, Front
from tests.conformance.test_concurrency import _run_threads

CANCELLED, REQUESTED = CancelOutcome.CANCELLED, CancelOutcome.REQUESTED
HOUR = dt.timedelta(hours=1)


def test_cancel_takes_ready_and_scheduled_items_out_for_good(split_front: Front) -> None:
    front = split_front
    now = front.push(name="now")
    later = front.push(name="later", delay=HOUR)
    kept = front.push(name="kept")
    assert front.cancel([now, later]) == {now: CANCELLED, later: CANCELLED}
    front.make_due()
    assert [i.id for i in front.pop_batch(10)] == [kept]
    assert front.states()[now] == front.states()[later] == State.CANCELLED
    assert front.stats()["cancelled"] == 2
    assert front.count("cancelled") == 2
    assert front.cancel_requested(now) is True
    assert front.purge("cancelled") == 2
    assert list(front.states()) == [kept]


def test_cancel_of_a_leased_item_is_requested_and_its_ack_records_it(
    split_front: Front,
) -> None:
    front = split_front
    front.push_many([{"name": "a"}, {"name": "b"}])
    a, b = front.pop_batch(2)
    assert front.cancel_requested(a.raw) is False
    assert front.cancel(a.id) == {a.id: REQUESTED}
    assert front.cancel_requested(a.raw) is True
    assert front.states()[a.id] == State.CANCELLING
    stats = front.stats()
    assert (stats["leased"], stats["cancelled"]) == (2, 0)  # still leased until settled
    assert front.extend([a]) == [a.id]  # the heartbeat keeps it cancelling
    assert front.states()[a.id] == State.CANCELLING
    assert sorted(front.ack([a, b])) == sorted([a.id, b.id])
    assert front.states() == {a.id: State.CANCELLED}  # kept, cancelled; b is gone
    assert front.counts() == (1, 1)
    assert front.stats()["cancelled"] == 1


def test_fail_or_release_of_a_cancelling_item_cancels_it(split_front: Front) -> None:
    front = split_front
    front.push_many([{"name": "a"}, {"name": "b"}])
    a, b = front.pop_batch(2)
    front.cancel([a.id, b.id])
    assert front.fail([a], "stopped") == {a.id: State.CANCELLED}  # never retried
    assert front.release([b]) == [b.id]
    assert front.states() == {a.id: State.CANCELLED, b.id: State.CANCELLED}
    front.make_due()
    assert front.pop_batch(10) == []


def test_cancel_reports_what_it_left_alone(split_front: Front) -> None:
    front = split_front
    front.push_many([{"name": str(i)} for i in range(3)])
    done, failed, cancelled = front.pop_batch(3)
    front.ack([done])
    front.fail([failed], "no", retry=False)
    front.cancel(cancelled.id)
    outcomes = front.cancel([done.id, failed.id, cancelled.id, 10**9])
    expected: dict[int, Any] = {
        failed.id: CancelOutcome.FINISHED,
        cancelled.id: CancelOutcome.ALREADY,
        10**9: CancelOutcome.MISSING,
        done.id: CancelOutcome.FINISHED if front.kept else CancelOutcome.MISSING,
    }
    assert outcomes == expected
    assert front.cancel([]) == {}
    assert front.cancel_requested(10**9) is False


def test_a_queue_that_keeps_done_items_records_the_cancelled_ack(kept_front: Front) -> None:
    front = kept_front
    front.push_many([{"name": "a"}, {"name": "b"}])
    a, b = front.pop_batch(2)
    front.cancel(a.id)
    front.ack([a, b])
    assert front.states() == {a.id: State.CANCELLED, b.id: State.DONE}
    acked, more = front.ack_pop([], 1)
    assert (acked, more) == (0, [])


def test_ack_pop_counts_a_cancelled_ack(split_front: Front) -> None:
    front = split_front
    front.push_many([{"name": str(i)} for i in range(3)])
    a, b = front.pop_batch(2)
    front.cancel(a.id)
    acked, more = front.ack_pop([a, b], 5)
    assert acked == 2 and len(more) == 1
    assert front.states()[a.id] == State.CANCELLED


def test_a_strict_ack_still_refuses_a_token_not_held(split_front: Front) -> None:
    front = split_front
    front.push_many([{"name": "a"}, {"name": "b"}])
    a, b = front.pop_batch(2)
    front.cancel(a.id)
    front.ack([b])
    with pytest.raises(NotLeased):
        front.ack([a, b])
    assert front.states() == {a.id: State.CANCELLING}  # nothing changed


def test_an_expired_cancelling_lease_is_never_delivered_again(split_front: Front) -> None:
    front = split_front
    a = front.push(name="a")
    (item,) = front.pop_batch(1)
    front.cancel(a)
    cancelling = int(State.CANCELLING)
    past = PAST[front.backend]
    front._raw(f'UPDATE "{front.meta_table}" SET lease_until = {past} WHERE state = {cancelling}')
    front.rescue()
    assert front.pop_batch(1) == []
    stats = front.stats()
    assert (stats["leased"], stats["expired"], stats["cancelled"]) == (0, 0, 1)
    assert front.count("cancelled") == 1 and front.count("leased") == 0
    assert front.next_due() is None
    assert front.ack([item]) == [a]  # its worker may still finish: recorded cancelled
    assert front.states() == {a: State.CANCELLED}


@pytest.mark.parametrize("bad", ["1", None, 1.5, [object()], {"id": 1}])
def test_cancel_refuses_what_is_not_an_item(split_front: Front, bad: object) -> None:
    with pytest.raises(InvalidArgument):
        split_front.cancel(bad)
    with pytest.raises(InvalidArgument):
        split_front.cancel_requested(bad)
    assert split_front.push(name="still usable") > 0


def test_a_ring_has_no_cancellation(ring_front: Front) -> None:
    ring_front.push(name="a")
    (item,) = ring_front.pop_batch(1)
    with pytest.raises(UnsupportedOperation, match="push order"):
        ring_front.cancel([item.id])
    assert ring_front.cancel_requested(item.raw) is False
    assert ring_front.stats()["cancelled"] == 0
    assert ring_front.count("cancelled") == 0
    assert ring_front.ack([item]) == [item.id]


@pytest.mark.slow
def test_cancel_racing_poppers_settles_every_item_one_way(split_front: Front) -> None:
    # Every item ends handled and acked, or cancelled and never handled: none both, none lost.
    front = split_front
    total = 600
    ids = front.push_many([{"name": str(i)} for i in range(total)])
    handled: set[int] = set()
    outcomes: dict[int, CancelOutcome] = {}
    lock = threading.Lock()

    def popper(f: Front) -> None:
        while batch := f.pop_batch(10):
            live = [i for i in batch if not f.cancel_requested(i.raw)]
            with lock:
                handled.update(i.id for i in live)
            f.ack(batch)

    def canceller(f: Front) -> None:
        for start in range(0, total, 7):
            found = f.cancel(ids[start : start + 7])
            with lock:
                outcomes.update(found)

    def run(f: Front) -> None:
        with lock:
            role = canceller if not run.started else popper  # type: ignore[attr-defined]
            run.started += 1  # type: ignore[attr-defined]
        role(f)

    run.started = 0  # type: ignore[attr-defined]
    _run_threads(4, run, front)
    states = front.states()
    cancelled = {i for i, s in states.items() if s == State.CANCELLED}
    assert set(states) <= set(ids)
    assert all(s in (State.CANCELLED, State.DONE) for s in states.values())
    assert not handled & cancelled - {i for i, o in outcomes.items() if o is REQUESTED}
    assert handled | cancelled == set(ids)
    at_once = {i for i, o in outcomes.items() if o is CANCELLED}
    assert at_once <= cancelled and not at_once & handled
    gone = set(ids) - set(states)  # acked and removed: handled (or done, kept)
    assert gone <= handled
