"""Arbitrary Python values thrown at every public method, on every front and layout: only
dbqueue's own errors come back (every call has the right number of arguments, so not even a
TypeError), a call that raised changed no row, and the next valid call on the same connection
works."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dbqueue.codec import shown
from dbqueue.errors import DBQueueError
from tests.conformance.fronts import Front

pytestmark = pytest.mark.slow

#: Values of every kind a caller might pass by mistake, the awkward ones included: ints past
#: every column's range, NaN and infinities, NUL and lone surrogates, extreme durations and
#: dates, containers, and objects no database knows.
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([2**63, -(2**63) - 1, 2**15, 10**40, 10**5000]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["", "a\x00b", "\ud800", "abc", "x" * 200]),
    st.binary(max_size=8),
    st.sampled_from([dt.timedelta.max, dt.timedelta.min, dt.timedelta(0), -dt.timedelta(1)]),
    st.timedeltas(),
    st.datetimes(),
    st.datetimes(timezones=st.just(dt.UTC)),
    st.dates(),
    st.decimals(allow_nan=True),
    st.uuids(),
    st.sampled_from([object(), object, Exception("x"), print, uuid, decimal.Decimal]),
)
VALUES = st.one_of(
    SCALARS,
    st.lists(SCALARS, max_size=3),
    st.tuples(SCALARS, SCALARS),
    st.dictionaries(st.text(max_size=4), SCALARS, max_size=2),
)
FIELD_NAMES = st.sampled_from(["name", "n", "doc", "at", "amount", "uid", "blob", "flag", "small"])


def _payload(v: Any, field: str) -> dict[str, Any]:
    return {"name": "ok", field: v}


#: One call of each public method with one arbitrary value ``v`` in one place (``f``: a field).
CALLS: dict[str, Callable[[Front, Any, str], Any]] = {
    "push(field=v)": lambda q, v, f: q.push(**_payload(v, f)),
    "push(priority=v)": lambda q, v, f: q.push(name="ok", priority=v),
    "push(delay=v)": lambda q, v, f: q.push(name="ok", delay=v),
    "push(run_at=v)": lambda q, v, f: q.push(name="ok", run_at=v),
    "push_many(v)": lambda q, v, f: q.push_many(v),
    "push_many([{field: v}])": lambda q, v, f: q.push_many([_payload(v, f)]),
    "pop_batch(v)": lambda q, v, f: q.pop_batch(v),
    "pop_batch(lease=v)": lambda q, v, f: q.pop_batch(1, lease=v),
    "pop_batch(mode=v)": lambda q, v, f: q.pop_batch(1, mode=v),
    "ack(v)": lambda q, v, f: q.ack(v),
    "fail(v)": lambda q, v, f: q.fail(v, "boom"),
    "fail(error=v)": lambda q, v, f: q.fail([], v),
    "fail(delay=v)": lambda q, v, f: q.fail([], "boom", delay=v),
    "extend(v)": lambda q, v, f: q.extend(v),
    "extend(lease=v)": lambda q, v, f: q.extend([(1, 1)], lease=v),
    "release(v)": lambda q, v, f: q.release(v),
    "retry(v)": lambda q, v, f: q.retry(v),
    "delete(v)": lambda q, v, f: q.delete(v),
    "purge(v)": lambda q, v, f: q.purge(v),
    "purge(older_than=v)": lambda q, v, f: q.purge("failed", older_than=v),
    "count(v)": lambda q, v, f: q.count(v),
    "count(older_than=v)": lambda q, v, f: q.count("ready", older_than=v),
    "set_priority(v, 1)": lambda q, v, f: q.set_priority(v, 1),
    "set_priority([1], v)": lambda q, v, f: q.set_priority([1], v),
}
#: A ring has no priorities: set_priority is the split queue's.
SPLIT_ONLY = {"set_priority(v, 1)", "set_priority([1], v)"}


def _rows(front: Front) -> tuple[Any, ...]:
    return front.counts(), tuple(sorted(front.states().items()))


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(call=st.sampled_from(sorted(CALLS)), v=VALUES, field=FIELD_NAMES)
def test_arbitrary_arguments_get_dbqueue_errors_and_change_nothing(
    front: Front, call: str, v: Any, field: str
) -> None:
    if front.ring and call in SPLIT_ONLY:
        return
    before = _rows(front)
    try:
        CALLS[call](front, v, field)
    except DBQueueError:  # (every call here has the right arity: no TypeError either)
        assert _rows(front) == before, f"{call} with v={shown(v)}, field={field}"
    # The connection is still usable: a valid call works.
    front.stats()


def test_a_bad_argument_leaves_the_caller_s_transaction_usable(front: Front) -> None:
    bad: list[Callable[[], Any]] = [
        lambda: front.pop_batch(2**63),
        lambda: front.ack([2**63]),
        lambda: front.ack([(1, 40_000)]),
        lambda: front.pop_batch(1, lease=dt.timedelta.max),
        lambda: front.push(name="x", n=10**5000),
        lambda: front.push(name=["a", "list"]),
        lambda: front.ack(None),
        lambda: front.ack("abc"),
    ]
    if not front.ring:
        bad.append(lambda: front.push(name="x", delay=dt.timedelta.max))
    with front.atomic():
        for call in bad:
            with pytest.raises(DBQueueError):
                call()
        front.push(name="kept")  # the transaction still works, and commits
    assert front.counts() == (1, 1)


@pytest.mark.parametrize(
    ("call", "names"),
    [
        (lambda f: f.ack("abc"), "items"),
        (lambda f: f.ack(None), "items"),
        (lambda f: f.pop_batch(2**63), "pop_batch"),
        (lambda f: f.pop_batch(1, lease=dt.timedelta.max), "lease"),
        (lambda f: f.ack([(1, 40_000)]), "attempts"),
        (lambda f: f.push(name="x", n=10**5000), "'n'"),
    ],
    ids=["str-items", "none-items", "huge-count", "huge-lease", "huge-attempts", "huge-int"],
)
def test_each_error_names_the_argument(
    front: Front, call: Callable[[Front], Any], names: str
) -> None:
    with pytest.raises(DBQueueError) as err:
        call(front)
    assert names in str(err.value)
