"""stats, pushed, purge and delete."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from dbqueue import State
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


def test_pushed_counts_every_push_and_never_goes_down(front: Front) -> None:
    # Numbers handed out, read from the database: a test database's earlier queue of the
    # same name may have used some, so from where it is now.
    before = front.pushed()
    front.push_many([{"name": str(i)} for i in range(3)])
    front.push(name="one more")
    assert front.pushed() == before + 4
    front.ack(front.pop_batch(4))
    front.purge()
    assert front.pushed() == before + 4  # acks and purges take nothing back


def test_purge_by_state_and_everything(front: Front) -> None:
    front.push_many([{"name": str(i)} for i in range(4)])
    front.pop_batch(1)
    assert front.purge("ready") == 3
    assert front.counts() == (1, 1)
    front.push(name="again")
    assert front.purge() == 2
    assert front.counts() == (0, 0)


def test_purge_tells_ready_items_from_scheduled_ones(front: Front) -> None:
    front.push_many([{"name": str(i)} for i in range(5)])
    leased, later = front.pop_batch(2)
    front.fail(later, "again in an hour", delay=dt.timedelta(hours=1))
    counts = {s: front.count(s) for s in ("ready", "scheduled", "leased", "done", "failed")}
    assert counts == {"ready": 3, "scheduled": 1, "leased": 1, "done": 0, "failed": 0}
    assert front.count() == 5
    assert front.purge("ready") == 3  # due now only: the scheduled item stays
    stats = front.stats()
    assert (stats["ready"], stats["scheduled"], stats["leased"]) == (0, 1, 1)
    assert front.purge(State.READY) == 0  # the stored state selects as "ready" does
    assert front.purge("SCHEDULED") == 1
    assert front.stats()["scheduled"] == 0
    assert list(front.states()) == [leased.id]


def test_purge_older_than_a_duration(front: Front) -> None:
    day = dt.timedelta(days=1)
    a, b, c, d = front.push_many([{"name": n} for n in "abcd"])
    front.backdate([a])
    assert front.count("ready", older_than=day) == 1
    assert front.purge("ready", older_than=day) == 1
    assert sorted(front.states()) == [b, c, d]
    front.backdate([b])
    popped = front.pop_batch(3)  # b, c and d leased
    assert front.purge("leased", older_than=day) == 1
    front.fail([i for i in popped if i.id != b], "no", retry=False)  # c and d failed
    failed_ids = sorted(front.states())
    front.backdate(failed_ids[:1])  # failed long ago
    assert front.purge("failed", older_than=day) == 1
    assert sorted(front.states()) == failed_ids[1:]
    # Any age at all: everything that was pushed (or failed) before now.
    assert front.purge(older_than=dt.timedelta(0)) == 1
    assert front.counts() == (0, 0)


def test_purge_rejects_an_unknown_state(front: Front) -> None:
    front.push(name="x")
    # A name, a number, or a value of another type (found by hypothesis: Decimal("sNaN")
    # made the enum raise decimal.InvalidOperation; 1.0 passed for leased).
    for state in ("finished", 7, Decimal("sNaN"), 1.0, True):
        with pytest.raises(InvalidArgument, match="unknown state"):
            front.purge(state)
        with pytest.raises(InvalidArgument, match="unknown state"):
            front.count(state)
    for age in (dt.timedelta(seconds=-1), 3600, "1h"):
        with pytest.raises(InvalidArgument, match="older_than"):
            front.purge("ready", older_than=age)
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
