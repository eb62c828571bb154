"""Push, push_many and pop_batch: ids, payload round trips, ordering, delays."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

from tests.conformance.fronts import Front

UTC = dt.UTC


def test_push_returns_increasing_ids(front: Front) -> None:
    first = front.push(name="a")
    second = front.push(name="b")
    assert second > first
    assert front.counts() == (2, 2)


def test_every_kind_round_trips(front: Front) -> None:
    at = dt.datetime(2026, 3, 1, 12, 30, 15, 250000, tzinfo=UTC)
    uid = uuid.uuid4()
    payload = {
        "name": "ünïcode ✓",
        "n": -2_000_000_000,
        "doc": {"list": [1, 2.5, None, "x"], "nested": {"ok": True}},
        "at": at,
        "amount": Decimal("123456.78"),
        "uid": uid,
        "blob": b"\x00\x01binary\xff",
        "flag": True,
        "small": 32767,
    }
    front.push(**payload)
    (item,) = front.pop_batch(1)
    got = item.payload
    assert got["name"] == payload["name"]
    assert got["n"] == payload["n"]
    assert got["doc"] == payload["doc"]
    assert got["at"] == at and got["at"].utcoffset() is not None
    assert Decimal(got["amount"]) == payload["amount"]
    assert got["uid"] == uid
    assert bytes(got["blob"]) == payload["blob"]
    assert got["flag"] is True
    assert got["small"] == 32767
    assert item.attempts == 1


def test_nullable_fields_and_defaults(front: Front) -> None:
    front.push(name="only the required field")
    (item,) = front.pop_batch(1)
    assert item.payload["doc"] is None and item.payload["at"] is None
    assert item.payload["n"] == 0 and item.payload["flag"] is False


def test_push_many_returns_ids_in_input_order(front: Front) -> None:
    rows = [{"name": f"row{i}", "n": i} for i in range(250)]
    ids = front.push_many(rows, batch_size=100)
    assert len(ids) == 250 and ids == sorted(ids)
    popped = front.pop_batch(250)
    by_id = {i.id: i.payload["n"] for i in popped}
    assert [by_id[i] for i in ids] == list(range(250))


def test_push_many_empty_is_a_no_op(front: Front) -> None:
    assert front.push_many([]) == []
    assert front.counts() == (0, 0)


def test_order_is_priority_then_run_at_then_id(split_front: Front) -> None:
    front = split_front
    low = front.push(name="low", priority=-5)
    mid1 = front.push(name="mid1")
    high = front.push(name="high", priority=10)
    mid2 = front.push(name="mid2")
    assert [i.id for i in front.pop_batch(10)] == [high, mid1, mid2, low]


def test_fifo_within_a_priority(front: Front) -> None:
    ids = front.push_many([{"name": str(i)} for i in range(20)])
    got = [
        i.id
        for batch in (front.pop_batch(7), front.pop_batch(7), front.pop_batch(7))
        for i in batch
    ]
    assert got == ids


def test_pop_batch_takes_at_most_n(front: Front) -> None:
    front.push_many([{"name": str(i)} for i in range(5)])
    assert len(front.pop_batch(3)) == 3
    assert len(front.pop_batch(3)) == 2
    assert front.pop_batch(3) == []


def test_delay_holds_an_item_back(split_front: Front) -> None:
    front = split_front
    later = front.push(name="later", delay=dt.timedelta(minutes=10))
    now = front.push(name="now")
    assert [i.id for i in front.pop_batch(10)] == [now]
    assert front.stats()["scheduled"] == 1
    front.make_due()
    assert [i.id for i in front.pop_batch(10)] == [later]


def test_run_at_in_the_future_and_past(split_front: Front) -> None:
    front = split_front
    future = dt.datetime.now(UTC) + dt.timedelta(hours=1)
    front.push(name="future", run_at=future)
    past = front.push(name="past", run_at=dt.datetime(2020, 1, 1, tzinfo=UTC))
    assert [i.id for i in front.pop_batch(10)] == [past]


def test_push_many_with_priority_and_delay(split_front: Front) -> None:
    front = split_front
    front.push_many([{"name": "a"}, {"name": "b"}], priority=3, delay=dt.timedelta(hours=1))
    front.push(name="c")
    assert [i.payload["name"] for i in front.pop_batch(10)] == ["c"]
    front.make_due()
    got = front.pop_batch(10)
    assert [i.payload["name"] for i in got] == ["a", "b"] and {i.priority for i in got} == {3}
