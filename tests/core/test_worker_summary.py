"""What the worker logs: each batch at DEBUG, and every ``summary_every`` seconds one INFO
line with what it handled and failed, the rate and each queue's oldest ready item."""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from dbqueue import Field, FieldKind, QueueOptions
from dbqueue.errors import InvalidArgument
from dbqueue.message import Message, State
from dbqueue.worker import Chore, Consumer, Worker, WorkerStats
from dbqueue.worker.summary import Summary
from tests.core.test_worker import (
    DATABASES,
    NO_WAIT,
    Setup,
    make_setup,
    run_in_thread,
    wait_until,
)

SUMMARY = re.compile(r"summary of the last \d+ s: (\d+) handled, (\d+) failed attempt\(s\)")


@pytest.fixture(params=DATABASES)
def db(request: pytest.FixtureRequest, table_name: str) -> Iterator[Setup]:
    options = QueueOptions(max_attempts=2, backoff=NO_WAIT)
    setup = make_setup(request, request.param, table_name, options)
    yield setup
    setup.ex.close()  # type: ignore[attr-defined]


def fail_odd(message: object) -> None:
    if message.payload["n"] % 2:  # type: ignore[attr-defined]
        raise ValueError("odd")


def test_batches_at_debug_and_a_summary_at_info(
    db: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    db.push(4)
    worker = Worker([Consumer(db.binding(), fail_odd, batch_size=2)], summary_every=0.05)

    def summed() -> tuple[int, int]:
        found = [SUMMARY.search(r.getMessage()) for r in caplog.records]
        counts = [(int(m[1]), int(m[2])) for m in found if m]
        return sum(h for h, _ in counts), sum(f for _, f in counts)

    with caplog.at_level(logging.DEBUG, logger="dbqueue.worker"):
        finish = run_in_thread(worker)
        try:
            # 2 handled; 2 odd items failed twice each (max_attempts=2): 4 failed attempts.
            wait_until(lambda: summed() == (2, 4))
        finally:
            finish()
    batches = [r for r in caplog.records if " ok, " in r.getMessage()]
    assert batches and {r.levelno for r in batches} == {logging.DEBUG}
    summaries = [r for r in caplog.records if SUMMARY.search(r.getMessage())]
    assert {r.levelno for r in summaries} == {logging.INFO}
    assert {r.threadName for r in summaries} == {"dbqueue-maintenance"}
    assert f"oldest ready: {db.binding().name} -" in summaries[-1].getMessage()


def test_a_summary_line_counts_since_the_last_one(db: Setup) -> None:
    db.push(1)  # ready: the line shows its age
    stats = WorkerStats()
    summary = Summary(stats, now=0.0)
    stats.handled, stats.failed, stats.retried = 120, 1, 2
    line = summary.line([db.binding()], now=60.0)
    assert line.startswith("summary of the last 60 s: 120 handled, 3 failed attempt(s), 2.0/s")
    assert re.search(rf"oldest ready: {db.binding().name} \d+\.\d s$", line)
    stats.handled += 30
    line = summary.line([], now=90.0)
    assert line.startswith("summary of the last 30 s: 30 handled, 0 failed attempt(s), 1.0/s")


# -- messages the core fails for good as it pops them ----------------------------------------

#: A field the test makes unreadable on each database, as SQL outside dbqueue could (see
#: tests/conformance/test_unreadable_rows.py): PostgreSQL, JSON nested deeper than Python's
#: decoder follows; SQLite, a UUID column holding text that is no UUID.
UNREADABLE = {
    "pg": "doc = '" + "[" * 5000 + "]" * 5000 + "'::jsonb",
    "sqlite": "uid = 'not a uuid'",
}
UNREADABLE_FIELDS = (
    Field("n", FieldKind.INTEGER),
    Field("doc", FieldKind.JSON, nullable=True),
    Field("uid", FieldKind.UUID, nullable=True),
)


@pytest.fixture(params=DATABASES)
def unreadable(request: pytest.FixtureRequest, table_name: str) -> Iterator[Setup]:
    """A queue holding two items, the first unreadable, the second n=2."""
    options = QueueOptions(max_attempts=2, backoff=NO_WAIT)
    setup = make_setup(request, request.param, table_name, options, fields=UNREADABLE_FIELDS)
    bad, _ = setup.queue.push_many(setup.ex, [{"n": 1}, {"n": 2}])
    table = setup.queue.spec.table
    setup.ex.execute(f'UPDATE "{table}" SET {UNREADABLE[setup.kind]} WHERE id = {bad}', {})
    yield setup
    setup.ex.close()  # type: ignore[attr-defined]


def handled_into(handled: list[int]) -> Callable[[Message], None]:
    return lambda message: handled.append(message.payload["n"])


def test_an_unreadable_message_counts_as_failed_when_the_worker_stops(
    unreadable: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    """The pop fails an unreadable message for good itself (no handler sees it): the worker
    counts it as failed all the same, in its closing summary and its metrics' tallies."""
    handled: list[int] = []
    binding = unreadable.binding()
    worker = Worker([Consumer(binding, handled_into(handled))], burst=True)
    with caplog.at_level(logging.INFO, logger="dbqueue.worker"):
        stats = worker.run(handle_signals=False)
    assert handled == [2]
    assert unreadable.states() == Counter({State.FAILED: 1})  # the other one acked
    assert stats.summary().startswith("1 handled, 1 failed, 0 attempt(s) to retry")
    stopped = [r.getMessage() for r in caplog.records if "worker stopped" in r.getMessage()]
    assert stopped and stopped[-1].startswith("worker stopped: 1 handled, 1 failed, 0 attempt")
    tally = worker.tallies.snapshot()[binding.name]
    assert (tally.handled, tally.failed, tally.retried) == (1, 1, 0)
    assert binding.take_failed_unreadable() == 0  # the worker took the count


def test_an_unreadable_message_counts_in_the_periodic_summary(
    unreadable: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    handled: list[int] = []
    worker = Worker([Consumer(unreadable.binding(), handled_into(handled))], summary_every=0.05)

    def summed() -> tuple[int, int]:
        found = [SUMMARY.search(r.getMessage()) for r in caplog.records]
        counts = [(int(m[1]), int(m[2])) for m in found if m]
        return sum(h for h, _ in counts), sum(f for _, f in counts)

    with caplog.at_level(logging.INFO, logger="dbqueue.worker"):
        finish = run_in_thread(worker)
        try:
            wait_until(lambda: summed() == (1, 1))
        finally:
            finish()
    assert handled == [2]


@pytest.mark.parametrize("every", [-1, float("inf"), True, "60"])
def test_summary_every_must_be_seconds(db: Setup, every: object) -> None:
    with pytest.raises(InvalidArgument, match="summary_every"):
        Worker([Consumer(db.binding(), fail_odd)], summary_every=every)  # type: ignore[arg-type]


def test_summary_every_zero_turns_it_off(db: Setup, caplog: pytest.LogCaptureFixture) -> None:
    rounds: list[None] = []
    counter = Chore("count", 0.01, lambda: rounds.append(None), lambda: None)
    worker = Worker([Consumer(db.binding(), fail_odd)], summary_every=0, chores=[counter])
    with caplog.at_level(logging.INFO, logger="dbqueue.worker"):
        finish = run_in_thread(worker)
        try:
            wait_until(lambda: len(rounds) >= 5)  # maintenance rounds went by
        finally:
            finish()
    assert not [r for r in caplog.records if "summary of the last" in r.getMessage()]
