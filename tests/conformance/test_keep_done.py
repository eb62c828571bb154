"""``keep_done``: every way an item leaves the queue successfully marks it done (state 2) and
keeps its data row; done items are never popped, rescued, retried or counted as ready, and
``purge("done")`` removes them. Run on every front (the ``kept_front`` fixture)."""

from __future__ import annotations

import datetime as dt

import pytest

from dbqueue.errors import NotLeased
from tests.conformance.fronts import Front

READY, LEASED, DONE, FAILED = 0, 1, 2, 3


def test_ack_marks_done_and_keeps_the_rows(kept_front: Front) -> None:
    front = kept_front
    ids = front.push_many([{"name": str(i), "n": i} for i in range(3)])
    batch = front.pop_batch(3)
    assert sorted(front.ack(batch)) == ids
    assert front.meta_rows() == dict.fromkeys(ids, (DONE, 1, True))
    assert front.counts() == (3, 3)  # both tables keep every row
    assert front.pop_batch(3) == []  # done items are never delivered again
    stats = front.stats()
    assert (stats["ready"], stats["leased"], stats["done"]) == (0, 0, 3)
    assert stats["oldest_ready_age"] is None


def test_ack_is_fenced_as_without_keep_done(kept_front: Front) -> None:
    front = kept_front
    front.push(name="x")
    (first,) = front.pop_batch(1)
    front.expire_leases()
    assert front.rescue().ready == 1
    (second,) = front.pop_batch(1)
    never_popped = front.push(name="y")
    with pytest.raises(NotLeased):
        front.ack(first)  # the stale token (attempt 1) is fenced off
    with pytest.raises(NotLeased) as err:
        front.ack([second, (never_popped, 1)])  # strict: nothing changes
    assert err.value.ids == [never_popped]
    assert front.states() == {second.id: LEASED, never_popped: READY}
    assert front.ack(second) == [second.id]
    assert front.ack(second, strict=False) == []  # done: no longer leased under its token
    with pytest.raises(NotLeased):
        front.ack(second)
    assert front.states() == {second.id: DONE, never_popped: READY}
    assert front.meta_rows()[second.id] == (DONE, 2, True)


def test_lenient_ack_marks_what_is_still_leased(kept_front: Front) -> None:
    front = kept_front
    a, b = front.push(name="a"), front.push(name="b")
    front.pop_batch(2)
    assert front.ack([(a, 1), (b + 1000, 1)], strict=False) == [a]
    assert front.states() == {a: DONE, b: LEASED}


def test_ack_pop_marks_the_acked_done_and_leases_the_next(kept_front: Front) -> None:
    front = kept_front
    a, b, c, d = front.push_many([{"name": n} for n in "abcd"])
    batch = front.pop_batch(2)
    acked, more = front.ack_pop(batch, 2)
    assert acked == 2 and [i.id for i in more] == [c, d]
    assert front.states() == {a: DONE, b: DONE, c: LEASED, d: LEASED}
    acked, more = front.ack_pop(more, 2)
    assert (acked, more) == (2, [])
    assert set(front.states().values()) == {DONE}
    assert front.counts() == (4, 4)


def test_at_most_once_pop_marks_done(kept_front: Front) -> None:
    front = kept_front
    a, b = front.push_many([{"name": "a", "n": 1}, {"name": "b", "n": 2}])
    items = front.pop_batch(2, mode="at_most_once")
    assert [(i.id, i.attempts, i.payload["n"]) for i in items] == [(a, 1, 1), (b, 1, 2)]
    assert front.meta_rows() == {a: (DONE, 1, True), b: (DONE, 1, True)}
    assert front.counts() == (2, 2)
    assert front.pop_batch(2, mode="at_most_once") == []


def test_transactional_pop_marks_done_with_the_callers_commit(kept_front: Front) -> None:
    front = kept_front
    a, b = front.push_many([{"name": "a"}, {"name": "b"}])
    with front.atomic():
        (item,) = front.pop_batch(1, mode="transactional")
    assert item.id == a
    assert front.states() == {a: DONE, b: READY}
    with pytest.raises(RuntimeError), front.atomic():
        front.pop_batch(1, mode="transactional")
        raise RuntimeError("the caller's work failed")
    assert front.states() == {a: DONE, b: READY}  # the rollback brought b back
    (item,) = front.pop_batch(1)
    assert (item.id, item.attempts) == (b, 1)


def test_done_items_are_not_rescued_retried_or_ready(kept_front: Front) -> None:
    front = kept_front
    a, b = front.push_many([{"name": "a"}, {"name": "b"}])
    front.ack(front.pop_batch(1))
    front.pop_batch(1)
    front.expire_leases()
    assert front.rescue().ready == 1  # b, whose lease expired; never the done a
    assert front.retry([a]) == 0  # retry takes failed items only
    assert front.states() == {a: DONE, b: READY}
    stats = front.stats()
    assert (stats["ready"], stats["done"], stats["failed"]) == (1, 1, 0)


def test_failure_still_ends_in_failed_not_done(kept_front: Front) -> None:
    front = kept_front
    item_id = front.push(name="flaky")
    for _ in range(3):  # max_attempts = 3
        front.make_due()
        front.fail(front.pop_batch(1), "boom", delay=dt.timedelta(0))
    assert front.states() == {item_id: FAILED}
    assert front.last_error(item_id) == "boom"


def test_a_done_item_keeps_the_error_of_an_earlier_attempt(kept_front: Front) -> None:
    front = kept_front
    item_id = front.push(name="second time lucky")
    front.fail(front.pop_batch(1), "first attempt failed", delay=dt.timedelta(0))
    front.ack(front.pop_batch(1))
    assert front.meta_rows() == {item_id: (DONE, 2, True)}
    assert front.last_error(item_id) == "first attempt failed"


def test_purge_and_delete_of_done_items(kept_front: Front) -> None:
    front = kept_front
    a, _, _, d = front.push_many([{"name": n} for n in "abcd"])
    front.ack(front.pop_batch(3))
    assert front.delete([a]) == 1
    assert front.purge("done") == 2  # b and c
    assert front.states() == {d: READY}
    assert front.counts() == (1, 1)


def test_purge_of_done_items_older_than_a_duration(kept_front: Front) -> None:
    front = kept_front
    a, b = front.push_many([{"name": n} for n in "ab"])
    front.backdate([a])  # pushed long ago, but it finishes now: the finish counts
    front.ack(front.pop_batch(2))
    front.backdate([b])  # finished long ago
    assert front.count("done", older_than=dt.timedelta(hours=1)) == 1
    assert front.purge("done", older_than=dt.timedelta(hours=1)) == 1
    assert front.states() == {a: DONE}
