"""Bad input on every front: a typed error with a message naming what was wrong, raised before
anything is written, and nothing already stored changed (docs/reference/api.md, "Errors").

Every test starts from a queue holding ready and leased items and compares ``counts()`` and
``states()`` before and after.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest

from dbqueue.arguments import MAX_RUN_AT
from dbqueue.errors import InvalidArgument, InvalidPayload, NotLeased, PayloadTooLarge
from tests.conformance.fronts import Front, Item

UTC = dt.UTC
FIELD_LIST = "name, n, doc, at, amount, uid, blob, flag, small"


@contextlib.contextmanager
def unchanged(front: Front) -> Iterator[None]:
    before = (front.counts(), front.states())
    yield
    assert (front.counts(), front.states()) == before, "bad input changed what was stored"


def store(front: Front) -> tuple[Front, Item, list[int]]:
    """Four items: the first leased, three ready (their ids returned)."""
    ids = front.push_many([{"name": f"stored{i}"} for i in range(4)])
    (leased,) = front.pop_batch(1)
    assert leased.id == ids[0]
    return front, leased, ids[1:]


@pytest.fixture
def stored(front: Front) -> tuple[Front, Item, list[int]]:
    return store(front)


@pytest.fixture
def split_stored(split_front: Front) -> tuple[Front, Item, list[int]]:
    """``stored`` on a split queue: for its scheduling arguments."""
    return store(split_front)


def raises(front: Front, error: type[Exception], call: Callable[[], Any], *fragments: str) -> str:
    with unchanged(front), pytest.raises(error) as err:
        call()
    message = str(err.value)
    for fragment in fragments:
        assert fragment in message, message
    return message


# -- push: payload ------------------------------------------------------------------------------

PAYLOAD_CASES = [
    pytest.param({"name": "x", "bogus": 1}, ["unknown field(s) 'bogus'", FIELD_LIST], id="unknown"),
    pytest.param({}, ["missing field(s) 'name'", FIELD_LIST], id="missing-name"),
    pytest.param({"name": "x" * 51}, ["'name'", "51 characters", "max 50"], id="name-too-long"),
    pytest.param({"name": "x", "n": "5"}, ["'n'", "integer"], id="n-str"),
    pytest.param({"name": "x", "n": True}, ["'n'", "bool"], id="n-bool"),
    pytest.param({"name": "x", "n": 2**31}, ["'n'", "out of range"], id="n-out-of-range"),
    pytest.param({"name": "x", "small": -1}, ["'small'", "out of range"], id="small-negative"),
    pytest.param({"name": "x", "doc": object()}, ["'doc'", "JSON"], id="doc-object"),
    pytest.param({"name": "x", "doc": {"v": float("nan")}}, ["'doc'", "JSON"], id="doc-nan"),
    pytest.param({"name": "x", "doc": "a\x00b"}, ["'doc'", "NUL"], id="doc-nul"),
    pytest.param({"name": "a\x00b"}, ["'name'", "NUL"], id="name-nul"),
    # A lone surrogate is a Python str but not text any database can store (no UTF-8 for it).
    pytest.param({"name": "a\ud800b"}, ["'name'"], id="name-lone-surrogate"),
    pytest.param({"name": "x", "doc": {"k": "\udfff"}}, ["'doc'"], id="doc-lone-surrogate"),
    pytest.param({"name": "x", "at": dt.datetime(2026, 1, 1)}, ["'at'", "naive"], id="at-naive"),
    pytest.param({"name": "x", "at": "2026-01-01"}, ["'at'", "datetime"], id="at-str"),
    pytest.param(
        {"name": "x", "amount": Decimal("1234567.89")},
        ["'amount'", "9 digits"],
        id="amount-9-digits",
    ),
    pytest.param({"name": "x", "amount": Decimal("NaN")}, ["'amount'", "finite"], id="amount-nan"),
    pytest.param({"name": "x", "blob": "text"}, ["'blob'", "bytes"], id="blob-str"),
    pytest.param({"name": "x", "uid": "not-a-uuid"}, ["'uid'", "UUID"], id="uid-garbage"),
    pytest.param({"name": "x", "flag": 1}, ["'flag'", "bool"], id="flag-int"),
    pytest.param({"name": None}, ["'name'", "not nullable"], id="name-none"),
]


@pytest.mark.parametrize(("payload", "fragments"), PAYLOAD_CASES)
def test_push_refuses_a_bad_payload(
    stored: tuple[Front, Item, list[int]], payload: dict[str, Any], fragments: list[str]
) -> None:
    front = stored[0]
    message = raises(front, InvalidPayload, lambda: front.push(**payload), *fragments)
    assert repr(front.data_table) in message  # names the queue


@pytest.mark.parametrize("key", ["id", "state", "attempts", "last_error", "enqueued_at", "Name"])
def test_a_key_that_is_not_a_payload_field_is_refused(
    stored: tuple[Front, Item, list[int]], key: str
) -> None:
    front = stored[0]
    raises(front, InvalidPayload, lambda: front.push(name="x", **{key: 1}), f"'{key}'", "unknown")


def test_an_oversize_payload_is_too_large(stored: tuple[Front, Item, list[int]]) -> None:
    front = stored[0]
    doc = {"text": "x" * 300 * 1024}
    message = raises(front, PayloadTooLarge, lambda: front.push(name="big", doc=doc),
                     "max_payload_bytes")  # fmt: skip
    assert repr(front.data_table) in message


# -- push: scheduling ---------------------------------------------------------------------------

SCHEDULE_CASES = [
    pytest.param({"priority": 40000}, ["priority", "40000", "-32768..32767"], id="priority-high"),
    pytest.param({"priority": -40000}, ["priority", "-40000"], id="priority-low"),
    pytest.param({"priority": 1.5}, ["priority", "1.5"], id="priority-float"),
    pytest.param({"priority": True}, ["priority", "True"], id="priority-bool"),
    pytest.param({"priority": "1"}, ["priority"], id="priority-str"),
    pytest.param({"delay": dt.timedelta(seconds=-1)}, ["delay", "non-negative"], id="delay-neg"),
    pytest.param({"delay": 5}, ["delay", "timedelta"], id="delay-int"),
    pytest.param({"run_at": dt.datetime(2030, 1, 1)}, ["run_at", "aware"], id="run-at-naive"),
    pytest.param({"run_at": "2030-01-01T00:00:00+00:00"}, ["run_at"], id="run-at-str"),
    pytest.param(
        {"delay": dt.timedelta(seconds=1), "run_at": dt.datetime(2030, 1, 1, tzinfo=UTC)},
        ["not both"],
        id="delay-and-run-at",
    ),
    # Past MAX_RUN_AT: near 9999, it has no time in a zone east of UTC (an admin's 500).
    pytest.param(
        {"run_at": dt.datetime(9999, 12, 31, 23, tzinfo=UTC)},
        ["run_at", "at most 9000-01-01 00:00:00+00:00", "9999, 12, 31, 23"],
        id="run-at-near-9999",
    ),
    pytest.param(
        {"run_at": MAX_RUN_AT + dt.timedelta(microseconds=1)},
        ["run_at", "at most 9000-01-01 00:00:00+00:00", "9000, 1, 1, 0, 0, 0, 1"],
        id="run-at-past-the-bound",
    ),
    # The bound is an instant: 9000-01-01 at 01:00 at UTC+01:00 is the bound, 01:01 is not.
    pytest.param(
        {"run_at": dt.datetime(9000, 1, 1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1)))},
        ["run_at", "at most 9000-01-01"],
        id="run-at-past-the-bound-in-another-zone",
    ),
    # Before year 1 in UTC: no database nor Python reads it back.
    pytest.param(
        {"run_at": dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1)))},
        ["run_at", "at least 0001-01-01 00:00:00+00:00"],
        id="run-at-before-year-1",
    ),
]


@pytest.mark.parametrize(("kwargs", "fragments"), SCHEDULE_CASES)
def test_push_refuses_bad_scheduling(
    split_stored: tuple[Front, Item, list[int]], kwargs: dict[str, Any], fragments: list[str]
) -> None:
    front = split_stored[0]
    raises(front, InvalidArgument, lambda: front.push(name="x", **kwargs), *fragments)


@pytest.mark.parametrize(("kwargs", "fragments"), SCHEDULE_CASES[:3] + SCHEDULE_CASES[5:])
def test_push_many_refuses_bad_scheduling(
    split_stored: tuple[Front, Item, list[int]], kwargs: dict[str, Any], fragments: list[str]
) -> None:
    front = split_stored[0]
    rows = [{"name": str(i)} for i in range(3)]
    raises(front, InvalidArgument, lambda: front.push_many(rows, **kwargs), *fragments)


@pytest.mark.parametrize(
    "run_at",
    [MAX_RUN_AT, dt.datetime(9000, 1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1)))],
    ids=["utc", "utc+1"],
)
def test_run_at_up_to_the_bound_is_taken(
    split_stored: tuple[Front, Item, list[int]], run_at: dt.datetime
) -> None:
    """MAX_RUN_AT itself is allowed: the item is stored, and waits."""
    front, _leased, ready = split_stored
    (far,) = front.push_many([{"name": "far"}], run_at=run_at)
    later = front.push(name="later", run_at=run_at)
    assert front.counts() == (6, 6)
    assert front.states()[far] == front.states()[later] == 0  # ready, not due
    assert {i.id for i in front.pop_batch(10)} == set(ready)


RING_SCHEDULE_CASES = [
    pytest.param({"priority": 5}, "no priorities", id="priority"),
    pytest.param({"delay": dt.timedelta(seconds=1)}, "cannot delay", id="delay"),
    pytest.param({"run_at": dt.datetime(2030, 1, 1, tzinfo=UTC)}, "cannot delay", id="run-at"),
]


@pytest.mark.parametrize(("kwargs", "fragment"), RING_SCHEDULE_CASES)
def test_a_ring_refuses_priorities_and_schedules(
    ring_front: Front, kwargs: dict[str, Any], fragment: str
) -> None:
    """A ring delivers in push order: it says so, and which layout to use instead."""
    front, _leased, ready = store(ring_front)
    raises(front, InvalidArgument, lambda: front.push(name="x", **kwargs), fragment, "split")
    rows = [{"name": "y"}]
    raises(front, InvalidArgument, lambda: front.push_many(rows, **kwargs), fragment, "split")
    raises(front, InvalidArgument, lambda: front.set_priority(ready, 1), "no priorities")


# -- push_many: all or nothing ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "error", "fragment"),
    [
        ({"name": "r6", "bogus": True}, InvalidPayload, "'bogus'"),
        ({"name": "r6", "n": "six"}, InvalidPayload, "'n'"),
        ({"name": "x" * 51}, InvalidPayload, "'name'"),
        ({"name": "r6", "doc": {"s": {1, 2}}}, InvalidPayload, "'doc'"),
        ({"name": "r6", "doc": {"t": "x" * 300 * 1024}}, PayloadTooLarge, "max_payload_bytes"),
    ],
    ids=["unknown", "wrong-type", "too-long", "not-json", "too-large"],
)
@pytest.mark.parametrize("batch_size", [None, 3], ids=["one-batch", "batches-of-3"])
def test_push_many_with_one_bad_row_writes_none_of_them(
    stored: tuple[Front, Item, list[int]],
    bad: dict[str, Any],
    error: type[Exception],
    fragment: str,
    batch_size: int | None,
) -> None:
    front = stored[0]
    rows: list[dict[str, Any]] = [{"name": f"r{i}", "n": i} for i in range(10)]
    rows[6] = bad  # row 7 of 10
    raises(front, error, lambda: front.push_many(rows, batch_size=batch_size), fragment)


@pytest.mark.parametrize("batch_size", [0, -1, "3", 2.5])
def test_push_many_refuses_a_bad_batch_size(
    stored: tuple[Front, Item, list[int]], batch_size: Any
) -> None:
    front = stored[0]
    rows = [{"name": str(i)} for i in range(3)]
    raises(front, InvalidArgument, lambda: front.push_many(rows, batch_size=batch_size),
           "batch_size")  # fmt: skip


# -- pop_batch ----------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, -1, "3", 1.5, True, None])
def test_pop_batch_refuses_a_bad_count(stored: tuple[Front, Item, list[int]], n: Any) -> None:
    front = stored[0]
    raises(front, InvalidArgument, lambda: front.pop_batch(n), "pop_batch", repr(n))


def test_pop_batch_refuses_an_unknown_mode(stored: tuple[Front, Item, list[int]]) -> None:
    front = stored[0]
    raises(front, InvalidArgument, lambda: front.pop_batch(1, mode="exactly_once"),
           "'exactly_once'", "at_most_once", "at_least_once", "transactional")  # fmt: skip


@pytest.mark.parametrize(
    "lease", [dt.timedelta(0), dt.timedelta(seconds=-5), 30], ids=["zero", "negative", "int"]
)
def test_pop_batch_refuses_a_bad_lease(stored: tuple[Front, Item, list[int]], lease: Any) -> None:
    front = stored[0]
    raises(front, InvalidArgument, lambda: front.pop_batch(1, lease=lease), "lease")


# -- ack, fail, extend --------------------------------------------------------------------------


def test_ack_of_items_never_popped_changes_nothing(stored: tuple[Front, Item, list[int]]) -> None:
    front, leased, ready = stored
    tokens = [(r, 1) for r in ready[:2]]  # tokens of deliveries that never happened
    message = raises(front, NotLeased, lambda: front.ack(tokens), str(ready[0]), str(ready[1]),
                     "nothing was changed")  # fmt: skip
    assert "ack" in message
    assert front.states()[leased.id] == 1  # the leased item is still leased
    assert front.ack(leased) == [leased.id]  # ... and can still be acked


def test_ack_of_ids_that_do_not_exist(stored: tuple[Front, Item, list[int]]) -> None:
    front = stored[0]
    with unchanged(front), pytest.raises(NotLeased) as err:
        front.ack([(10**9, 1), (10**9 + 1, 1)])
    assert err.value.ids == [10**9, 10**9 + 1]


def test_ack_of_a_mix_acks_nothing(stored: tuple[Front, Item, list[int]]) -> None:
    front, leased, ready = stored
    with unchanged(front), pytest.raises(NotLeased) as err:
        front.ack([leased, (ready[0], 1)])
    assert err.value.ids == [ready[0]]
    assert front.ack([leased]) == [leased.id]


def test_fail_of_a_mix_fails_nothing(stored: tuple[Front, Item, list[int]]) -> None:
    front, leased, ready = stored
    with unchanged(front), pytest.raises(NotLeased) as err:
        front.fail([leased, (ready[0], 1)], "boom")
    assert err.value.ids == [ready[0]] and "fail" in str(err.value)
    assert front.last_error(leased.id) is None


@pytest.mark.parametrize("errors", [[], ["a", "b"], ["a", "b", "c"]], ids=["none", "two", "three"])
def test_fail_with_the_wrong_number_of_errors(
    stored: tuple[Front, Item, list[int]], errors: list[str]
) -> None:
    front, leased, _ready = stored
    raises(front, InvalidArgument, lambda: front.fail([leased], errors), "one per item")
    assert front.last_error(leased.id) is None


def test_fail_with_an_error_that_is_not_a_str(stored: tuple[Front, Item, list[int]]) -> None:
    front, leased, _ready = stored
    raises(front, InvalidArgument, lambda: front.fail([leased], [42]), "error")


def test_fail_with_a_negative_delay(stored: tuple[Front, Item, list[int]]) -> None:
    front, leased, _ready = stored
    raises(front, InvalidArgument,
           lambda: front.fail(leased, "x", delay=dt.timedelta(seconds=-1)), "delay")  # fmt: skip


def test_extend_with_a_zero_lease(stored: tuple[Front, Item, list[int]]) -> None:
    front, leased, _ready = stored
    raises(front, InvalidArgument, lambda: front.extend(leased, lease=dt.timedelta(0)), "lease")


@pytest.mark.parametrize("item", [True, "abc", 1.5], ids=["bool", "str", "float"])
def test_ack_of_something_that_is_not_an_item(
    stored: tuple[Front, Item, list[int]], item: Any
) -> None:
    front = stored[0]
    raises(front, InvalidArgument, lambda: front.ack([item]), "not an item")


# -- administration -----------------------------------------------------------------------------


def test_retry_and_delete_of_nothing_return_zero(stored: tuple[Front, Item, list[int]]) -> None:
    front = stored[0]
    with unchanged(front):
        assert front.retry([]) == 0
        assert front.delete([]) == 0
        assert front.ack([]) == []
        assert front.fail([], "x") == {}
        assert front.extend([]) == []


def test_purge_of_an_unknown_state(stored: tuple[Front, Item, list[int]]) -> None:
    front = stored[0]
    raises(front, InvalidArgument, lambda: front.purge("finished"), "'finished'", "failed")
    raises(front, InvalidArgument, lambda: front.purge(7), "7")


@pytest.mark.parametrize("batch", [0, "2", 2.5])
def test_rescue_refuses_a_bad_batch_size(stored: tuple[Front, Item, list[int]], batch: Any) -> None:
    front = stored[0]
    raises(front, InvalidArgument, lambda: front.rescue(batch=batch), "batch")


def test_rescue_refuses_a_negative_batch_size(stored: tuple[Front, Item, list[int]]) -> None:
    # Run in a thread with a deadline: with batch=-1, a loop that waits for a short batch
    # (len(rows) < -1) would never end. A hung call is stopped with sqlite3's interrupt() or
    # psycopg's cancel(), both made to be called from another thread (Front.interrupter).
    front = stored[0]
    stop: list[Callable[[], None]] = []
    outcome: list[BaseException | object] = []

    def run() -> None:
        try:
            other = front.clone()  # this thread's own connection
            try:
                stop.append(other.interrupter())
                outcome.append(other.rescue(batch=-1))
            finally:
                other.close()
        except BaseException as exc:  # reported below
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    with unchanged(front):
        thread.start()
        thread.join(timeout=5)
        hung = thread.is_alive()
        for _ in range(1000):  # stop a hung call
            if not thread.is_alive():
                break
            stop[0]()
            thread.join(timeout=0.01)
    assert not hung, "rescue(batch=-1) never returned"
    assert isinstance(outcome[0], InvalidArgument), repr(outcome[0])
    assert "batch" in str(outcome[0])
