"""Delivery modes, acknowledgement with fencing, failure and back-off, leases and rescue."""

from __future__ import annotations

import datetime as dt

import pytest

from dbqueue.errors import InvalidArgument, NotLeased, TransactionStateError
from tests.conformance.fronts import Front

READY, LEASED, DONE, FAILED = 0, 1, 2, 3


def test_at_least_once_leases_and_ack_removes(front: Front) -> None:
    ids = front.push_many([{"name": str(i)} for i in range(3)])
    batch = front.pop_batch(3)
    assert set(front.states().values()) == {LEASED}
    assert front.pop_batch(3) == []  # leased items are not handed out twice
    assert sorted(front.ack(batch)) == ids
    assert front.counts() == (0, 0)


def test_a_popped_items_lease_is_an_aware_time_in_utc(front: Front) -> None:
    """The same tzinfo on every front and database (PostgreSQL's driver would give the
    connection's TimeZone as a ZoneInfo, SQLite's text none)."""
    front.push(name="a")
    (item,) = front.pop_batch(1)
    lease_until = item.raw.lease_until
    assert lease_until.tzinfo is dt.UTC
    assert lease_until > dt.datetime.now(dt.UTC)
    front.ack([item])


def test_strict_ack_of_an_item_not_leased_changes_nothing(front: Front) -> None:
    front.push_many([{"name": "a"}, {"name": "b"}])
    batch = front.pop_batch(2)
    never_popped = front.push(name="c")
    with pytest.raises(NotLeased) as err:
        front.ack([*batch, (never_popped, 1)])
    assert err.value.ids == [never_popped]
    assert front.counts() == (3, 3)
    assert sorted(front.ack(batch)) == sorted(i.id for i in batch)


def test_lenient_ack_removes_what_is_still_leased(front: Front) -> None:
    a, b = front.push(name="a"), front.push(name="b")
    batch = front.pop_batch(2)
    assert front.ack([(a, 1), (b + 1000, 1)], strict=False) == [a]
    assert front.counts() == (1, 1)
    assert front.ack(batch, strict=False) == [b]


def test_an_expired_lease_cannot_ack_the_redelivered_copy(front: Front) -> None:
    front.push(name="x")
    (first,) = front.pop_batch(1)
    front.expire_leases()
    assert front.rescue().ready == 1
    (second,) = front.pop_batch(1)
    assert second.payload["name"] == "x" and second.attempts == 2
    assert (second.id != first.id) == front.renumbers  # a ring pushes it again at its tail
    with pytest.raises(NotLeased):
        front.ack(first)  # the stale token (attempt 1) is fenced off
    assert front.ack(second) == [second.id]


def test_a_stale_consumer_settles_nothing_in_any_form(front: Front) -> None:
    front.push(name="x")
    (first,) = front.pop_batch(1)  # consumer A
    front.expire_leases()
    assert front.rescue().ready == 1
    (second,) = front.pop_batch(1)  # consumer B has it now
    for token in (first, [first], [(first.id, first.attempts)]):
        with pytest.raises(NotLeased):
            front.ack(token)
        with pytest.raises(NotLeased):
            front.fail(token, "late")
        assert front.extend(token) == [] and front.release(token) == []
    for bare in (first.id, [first.id], [(first.id, None)]):  # an id alone is not a delivery
        for settle in (front.ack, front.extend, front.release):
            with pytest.raises(InvalidArgument, match="not bare ids"):
                settle(bare)
        with pytest.raises(InvalidArgument, match="not bare ids"):
            front.fail(bare, "late")
    assert front.ack(second) == [second.id]
    assert front.counts() == (0, 0)


def test_an_operator_settles_by_id_whichever_delivery_holds_it(front: Front) -> None:
    front.push_many([{"name": "a"}, {"name": "b"}])
    a, b = front.pop_batch(2)
    assert front.ack_by_id([a.id]) == [a.id]
    assert front.fail_by_id(b.id, "stuck downstream") == {b.id: READY}
    assert front.ack_by_id([a.id]) == []  # no longer leased
    assert front.counts() == (1, 1)


def test_fail_backs_off_then_fails_after_max_attempts(front: Front) -> None:
    first = front.push(name="flaky")
    for attempt in (1, 2):
        (item,) = front.pop_batch(1)
        assert item.attempts == attempt and item.payload["name"] == "flaky"
        assert (item.id != first) == (front.renumbers and attempt > 1)
        assert front.fail(item, f"boom {attempt}") == {item.id: READY}
        assert front.pop_batch(1) == []  # backing off
        assert front.stats()["scheduled"] == 1
        front.make_due()
    (item,) = front.pop_batch(1)
    assert front.fail(item, "boom 3") == {item.id: FAILED}  # max_attempts = 3
    assert front.states() == {item.id: FAILED}
    assert front.last_error(item.id) == "boom 3"
    stats = front.stats()
    assert stats["failed"] == 1 and stats["ready"] == 0


@pytest.mark.parametrize(
    ("error", "stored"),
    [
        ("bad\x00byte", "bad\\x00byte"),  # PostgreSQL's text refuses NUL
        ("lone \ud800 half", "lone \\ud800 half"),  # no UTF-8 database takes it
    ],
    ids=["nul", "lone-surrogate"],
)
def test_an_error_text_the_database_cannot_store_is_stored_escaped(
    front: Front, error: str, stored: str
) -> None:
    front.push(name="x")
    (item,) = front.pop_batch(1)
    assert front.fail(item, error) == {item.id: READY}
    assert front.last_error(item.id) == stored


def test_a_huge_error_text_is_cut_in_the_middle_with_a_marker(front: Front) -> None:
    front.push(name="x")
    (item,) = front.pop_batch(1)
    front.fail(item, "head " + "x" * 100_000 + " tail")
    text = front.last_error(item.id)
    assert text is not None and len(text) <= 65_536
    assert text.startswith("head ") and text.endswith(" tail")
    assert "characters cut by dbqueue" in text


def test_release_hands_back_unstarted_items_with_their_attempt_undone(front: Front) -> None:
    front.push_many([{"name": "a"}, {"name": "b"}, {"name": "c"}])
    first, second, third = front.pop_batch(3)
    assert front.release([second, third]) == sorted([second.id, third.id])
    assert front.ack(first) == [first.id]
    again = front.pop_batch(3)  # at once: no lease to wait out, no back-off
    assert [i.payload["name"] for i in again] == ["b", "c"]
    assert [i.attempts for i in again] == [1, 1]  # the released delivery is not counted
    assert front.release([first]) == []  # not leased any more: nothing to release
    assert front.ack(again) == sorted(i.id for i in again)
    assert front.counts() == (0, 0)


def test_next_due_is_the_earliest_lease_expiry_or_back_off_end(front: Front) -> None:
    assert front.next_due() is None  # nothing that a push would not announce
    front.push_many([{"name": "a"}, {"name": "b"}])
    a, b = front.pop_batch(2, lease=dt.timedelta(minutes=10))
    start = dt.datetime.now(dt.UTC)

    def due_in() -> dt.timedelta:
        due = front.next_due()
        assert due is not None and due.tzinfo is not None
        return due - start

    assert dt.timedelta(minutes=9) < due_in() <= dt.timedelta(minutes=10, seconds=5)
    front.fail(a, "later", delay=dt.timedelta(minutes=2))  # sooner than b's lease
    assert dt.timedelta(minutes=1) < due_in() <= dt.timedelta(minutes=2, seconds=5)
    front.ack(b)
    assert dt.timedelta(minutes=1) < due_in() <= dt.timedelta(minutes=2, seconds=5)


def test_retry_brings_a_failed_item_back_with_attempts_reset(front: Front) -> None:
    front.push(name="x")
    for _ in range(3):
        front.make_due()
        (item,) = front.pop_batch(1)
        front.fail(item, "nope")
    assert front.states() == {item.id: FAILED}
    assert front.retry([item.id]) == 1
    (again,) = front.pop_batch(1)
    assert again.payload["name"] == "x" and again.attempts == 1
    assert (again.id != item.id) == front.renumbers
    assert front.retry([again.id]) == 0  # leased, not failed


def test_fail_with_explicit_delay_and_a_stale_token(front: Front) -> None:
    import datetime as dt

    front.push(name="x")
    (item,) = front.pop_batch(1)
    front.fail(item, "later", delay=dt.timedelta(0))
    (again,) = front.pop_batch(1)
    assert again.attempts == 2
    with pytest.raises(NotLeased):
        front.fail(item, "stale")


def test_rescue_returns_expired_leases_and_fails_exhausted_ones(front: Front) -> None:
    front.push_many([{"name": str(i)} for i in range(4)])
    front.pop_batch(4)
    assert front.rescue().ready == 0  # leases still valid
    front.expire_leases()
    assert front.stats()["expired"] == 4
    result = front.rescue(batch=3)  # loops over small batches
    assert (result.ready, result.failed) == (4, 0)
    assert len(front.pop_batch(10)) == 4
    front.expire_leases()  # attempt 2 expires: ready again
    assert front.rescue().ready == 4
    assert {i.attempts for i in front.pop_batch(10)} == {3}
    front.expire_leases()  # attempt 3 = max_attempts expires: failed for good
    assert front.rescue().failed == 4
    assert front.stats()["failed"] == 4


def test_extend_pushes_the_lease_out(front: Front) -> None:
    front.push(name="slow")
    (item,) = front.pop_batch(1)
    front.expire_leases()
    assert front.extend(item) == [item.id]
    assert front.rescue().ready == 0
    assert front.ack(item) == [item.id]


def test_at_most_once_removes_in_the_same_statement(front: Front) -> None:
    front.push_many([{"name": str(i)} for i in range(3)])
    got = front.pop_batch(2, mode="at_most_once")
    assert len(got) == 2 and got[0].attempts == 1
    assert front.counts() == (1, 1)


def test_at_most_once_refuses_an_open_transaction(front: Front) -> None:
    front.push(name="x")
    with pytest.raises(TransactionStateError), front.atomic():
        front.pop_batch(1, mode="at_most_once")
    assert front.counts() == (1, 1)


def test_transactional_needs_a_transaction(front: Front) -> None:
    """Outside ``atomic()`` the core's and Django's connections autocommit: a transactional
    pop would commit at once, so it is refused. A SQLAlchemy Session is always in a
    transaction its user commits, so there the pop joins it (``Front.
    transactional_needs_atomic``); it is gone once that transaction commits."""
    front.push(name="x")
    if front.transactional_needs_atomic:
        with pytest.raises(TransactionStateError):
            front.pop_batch(1, mode="transactional")
        assert front.counts() == (1, 1)
    else:
        (item,) = front.pop_batch(1, mode="transactional")
        assert item.payload["name"] == "x" and item.attempts == 1
        assert front.counts() == (0, 0)


def test_transactional_pop_commits_with_the_caller(front: Front) -> None:
    front.push_many([{"name": "a"}, {"name": "b"}])
    with front.atomic():
        got = front.pop_batch(1, mode="transactional")
    assert [i.payload["name"] for i in got] == ["a"]
    assert front.counts() == (1, 1)


def test_transactional_rollback_puts_items_back(front: Front) -> None:
    ids = front.push_many([{"name": "a"}, {"name": "b"}])

    class Boom(Exception):
        pass

    with pytest.raises(Boom), front.atomic():
        assert len(front.pop_batch(2, mode="transactional")) == 2
        raise Boom
    assert front.counts() == (2, 2)
    if front.rollback_strands:  # the sweeper pushes them again, in their order
        assert front.rescue().ready == 2
    again = front.pop_batch(2)
    assert [i.payload["name"] for i in again] == ["a", "b"]
    assert ([i.id for i in again] != ids) == front.rollback_strands


def test_push_in_a_rolled_back_transaction_leaves_nothing(front: Front) -> None:
    class Boom(Exception):
        pass

    with pytest.raises(Boom), front.atomic():
        front.push(name="x")
        front.push_many([{"name": "y"}, {"name": "z"}])
        raise Boom
    assert front.counts() == (0, 0)


def test_a_tuple_of_items_is_a_sequence_not_a_token(front: Front) -> None:
    front.push_many([{"name": "a"}, {"name": "b"}, {"name": "c"}])
    a, b, c = front.pop_batch(3)
    assert sorted(front.ack((a, b))) == sorted([a.id, b.id])
    assert front.ack([(c.id, c.attempts)]) == [c.id]  # a token, inside a list
    assert front.counts() == (0, 0)


# -- ack_pop: a worker's ack of one batch and pop of the next, in one transaction -------------


def test_ack_pop_acks_the_batch_and_leases_the_next(front: Front) -> None:
    ids = front.push_many([{"name": str(i)} for i in range(5)])
    first = front.pop_batch(2)
    acked, second = front.ack_pop(first, 2)
    assert acked == 2
    assert [i.id for i in second] == ids[2:4]
    assert all(i.attempts == 1 for i in second)
    assert front.counts() == (3, 3)
    assert list(front.states().values()).count(1) == 2  # the second batch is leased


def test_ack_pop_with_nothing_to_ack_is_a_pop(front: Front) -> None:
    ids = front.push_many([{"name": "a"}, {"name": "b"}])
    acked, items = front.ack_pop([], 5)
    assert (acked, [i.id for i in items]) == (0, ids)


def test_ack_pop_with_nothing_left_still_acks(front: Front) -> None:
    front.push_many([{"name": "a"}])
    acked, items = front.ack_pop(front.pop_batch(1), 10)
    assert (acked, items) == (1, [])
    assert front.counts() == (0, 0)


def test_ack_pop_skips_items_whose_lease_was_lost(front: Front) -> None:
    a, b = front.push_many([{"name": "a"}, {"name": "b"}])
    held = front.pop_batch(2)
    front.expire_leases()
    front.rescue()  # both back to ready, attempts 1: the tokens in `held` are stale for a...
    (again,) = front.pop_batch(1)  # ...and a is leased again, under attempts 2
    acked, items = front.ack_pop(held, 5)
    assert acked == 0  # neither stale token matched
    assert [i.payload["name"] for i in items] == ["b"]
    assert front.ack([again]) == [again.id]  # the current holder still owns it
    assert again.payload["name"] == "a"
    assert ([again.id, items[0].id] != [a, b]) == front.renumbers


def test_ack_pop_refuses_a_bad_count_and_acks_nothing(front: Front) -> None:
    front.push_many([{"name": "a"}])
    held = front.pop_batch(1)
    with pytest.raises(InvalidArgument, match="positive int"):
        front.ack_pop(held, 0)
    assert front.ack(held) == [held[0].id]
