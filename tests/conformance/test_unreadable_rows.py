"""Rows written outside dbqueue: a pop never hands out a message it cannot read, never leaves
one leased, and the rest of its batch is delivered."""

from __future__ import annotations

import logging

import pytest

from dbqueue.message import State
from tests.conformance.fronts import Front

#: JSON nested deeper than Python's decoder follows (RecursionError), as another language's
#: producer or a trigger could write it.
TOO_DEEP = "[" * 5000 + "]" * 5000


def _poison(front: Front, number: int) -> str:
    """Make message ``number`` unreadable, as SQL outside dbqueue could; the error it gets.
    PostgreSQL: JSON too deep to decode. SQLite (whose JSON functions, which Django's CHECK
    constraint on a JSONField calls, refuse JSON deeper than Python's decoder follows): a
    UUID column holding text that is no UUID."""
    key = "seq" if front.ring else "id"
    if front.backend == "postgresql":
        change, error = f"doc = '{TOO_DEEP}'::jsonb", "RecursionError"
    else:
        change, error = "uid = 'not a uuid'", "ValueError"
    front._raw(f'UPDATE "{front.data_table}" SET {change} WHERE {key} = {number}')
    return error


def test_a_message_that_cannot_be_read_fails_alone(front: Front) -> None:
    a, b, c = front.push_many([{"name": "a"}, {"name": "b"}, {"name": "c"}])
    raised = _poison(front, b)
    got = front.pop_batch(3)
    assert [i.id for i in got] == [a, c]  # the rest of the batch is handled
    assert front.states()[b] == int(State.FAILED)  # at once, not after its lease
    error = front.last_error(b)
    assert error is not None and error.startswith("unreadable: dbqueue could not decode")
    assert raised in error
    front.ack(got)
    assert front.pop_batch(3) == []


def test_a_message_popped_at_most_once_that_cannot_be_read_is_logged(
    front: Front, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = front.push_many([{"name": "a"}, {"name": "b"}])
    _poison(front, b)
    with caplog.at_level(logging.ERROR, logger="dbqueue"):
        got = front.pop_batch(2, mode="at_most_once")
    assert [i.id for i in got] == [a]
    assert any(f"message {b} dropped" in r.getMessage() for r in caplog.records)


def test_a_pop_removes_a_meta_row_whose_data_row_sql_deleted(
    split_front: Front, caplog: pytest.LogCaptureFixture
) -> None:
    front = split_front
    a, b, c = front.push_many([{"name": "a"}, {"name": "b"}, {"name": "c"}])
    front._raw(f'DELETE FROM "{front.data_table}" WHERE id = {b}')
    with caplog.at_level(logging.WARNING, logger="dbqueue"):
        got = front.pop_batch(3)
    assert [i.id for i in got] == [a, c]  # no item with every field None
    assert all(i.payload["name"] in ("a", "c") for i in got)
    assert front.counts() == (2, 2)  # the orphan is gone, not left leased
    assert set(front.states()) == {a, c}
    assert any("data row was deleted outside dbqueue" in r.getMessage() for r in caplog.records)
    stats = front.stats()
    assert (stats["ready"], stats["leased"], stats["failed"]) == (0, 2, 0)


def test_a_removing_pop_skips_a_meta_row_whose_data_row_sql_deleted(split_front: Front) -> None:
    front = split_front
    a, b = front.push_many([{"name": "a"}, {"name": "b"}])
    front._raw(f'DELETE FROM "{front.data_table}" WHERE id = {a}')
    got = front.pop_batch(2, mode="at_most_once")
    assert [i.id for i in got] == [b]
    assert front.counts() == (0, 0)


def test_a_timestamp_the_client_cannot_represent_never_blocks_the_batch(front: Front) -> None:
    """PostgreSQL's 'infinity' is past what Python's datetime holds, and on SQLite text that
    is no time at all. The rest of the batch is delivered and nothing stays leased: the bad
    one is failed alone where the driver cannot load it, or read the way the driver reads it
    (asyncpg: datetime.max; Django's SQLite converter: None)."""
    a, b, c = front.push_many([{"name": "a"}, {"name": "b"}, {"name": "c"}])
    bad = "'infinity'" if front.backend == "postgresql" else "'no time at all'"
    key = "seq" if front.ring else "id"
    front._raw(f'UPDATE "{front.data_table}" SET at = {bad} WHERE {key} = {b}')
    got = front.pop_batch(3)
    ids = [i.id for i in got]
    assert a in ids and c in ids
    if b in ids:  # read as the driver reads it
        at = got[ids.index(b)].payload["at"]
        assert at is None or at.year == 9999
    else:  # failed at once, with its own error
        assert front.states()[b] == int(State.FAILED)
        error = front.last_error(b)
        assert error is not None and error.startswith("unreadable: dbqueue could not decode")
    front.ack(got)
    assert int(State.LEASED) not in front.states().values()
