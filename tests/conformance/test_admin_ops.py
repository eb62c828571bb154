"""stats, purge and delete."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from dbqueue.errors import InvalidArgument
from tests.conformance.fronts import Front


def test_stats_counts_every_state_and_the_oldest_age(front: Front) -> None:
    empty = {
        "ready": 0, "scheduled": 0, "leased": 0, "expired": 0, "done": 0, "failed": 0,
        "oldest_ready_age": None,
    }  # fmt: skip
    stats = front.stats()
    assert {k: stats.pop(k) for k in empty} == empty
    # A ring says how many slots it has (and the fronts' reports, how many are in use).
    assert stats.get("capacity") == front.capacity
    assert stats.get("occupancy", 0.0) in (0.0, None)
    front.push_many([{"name": str(i)} for i in range(6)])
    *_, later = front.pop_batch(3)
    front.fail(later, "again in an hour", delay=dt.timedelta(hours=1))
    stats = front.stats()
    assert (stats["ready"], stats["scheduled"], stats["leased"]) == (3, 1, 2)
    assert isinstance(stats["oldest_ready_age"], dt.timedelta)
    assert stats["oldest_ready_age"] >= dt.timedelta(0)


def test_purge_by_state_and_everything(front: Front) -> None:
    front.push_many([{"name": str(i)} for i in range(4)])
    front.pop_batch(1)
    assert front.purge("ready") == 3
    assert front.counts() == (1, 1)
    front.push(name="again")
    assert front.purge() == 2
    assert front.counts() == (0, 0)


def test_purge_rejects_an_unknown_state(front: Front) -> None:
    front.push(name="x")
    # A name, a number, or a value of another type (found by hypothesis: Decimal("sNaN")
    # made the enum raise decimal.InvalidOperation; 1.0 passed for leased).
    for state in ("finished", 7, Decimal("sNaN"), 1.0, True):
        with pytest.raises(InvalidArgument, match="unknown state"):
            front.purge(state)
    assert front.counts() == (1, 1)


def test_delete_by_id_in_any_state(front: Front) -> None:
    a, b, c = front.push_many([{"name": "a"}, {"name": "b"}, {"name": "c"}])
    front.pop_batch(1)
    assert front.delete([a, c, 99999]) == 2
    assert front.counts() == (1, 1)
    assert front.delete([]) == 0
    assert list(front.states()) == [b]


def test_set_priority_reorders_delivery(split_front: Front) -> None:
    front = split_front
    a, b, c = front.push_many([{"name": "a"}, {"name": "b"}, {"name": "c"}])
    assert front.set_priority([c], 5) == 1
    assert front.set_priority([], 5) == 0
    assert [item.id for item in front.pop_batch(3)] == [c, a, b]


def test_set_priority_of_a_failed_item_keeps_it_for_the_retry(split_front: Front) -> None:
    front = split_front
    (a,) = front.push_many([{"name": "a"}])
    front.fail(front.pop_batch(1), "boom", delay=dt.timedelta(0))
    assert front.set_priority(a, -3) == 1
    (item,) = front.pop_batch(1)
    assert (item.id, item.priority) == (a, -3)


@pytest.mark.parametrize("priority", [40_000, -40_000, 1.5, True, "high"])
def test_set_priority_refuses_a_bad_priority(split_front: Front, priority: object) -> None:
    front = split_front
    (a,) = front.push_many([{"name": "a"}])
    with pytest.raises(InvalidArgument, match="priority"):
        front.set_priority([a], priority)
    (item,) = front.pop_batch(1)
    assert item.priority == 0
