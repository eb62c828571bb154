"""The worker and a database that refuses what it is sent: an error text it cannot store, a
settle refused by the database (a trigger here), told apart from an outage. Never an endless
loop: every burst below ends."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

import pytest

from dbqueue import QueueOptions
from dbqueue.message import Message, State
from dbqueue.worker import REFUSED_ERROR, Consumer, Worker, WorkerStats
from tests.core.test_worker import DATABASES, NO_WAIT, PATIENCE, Setup, make_setup


@pytest.fixture(params=DATABASES)
def db(request: pytest.FixtureRequest, table_name: str) -> Iterator[Setup]:
    setup = make_setup(
        request, request.param, table_name, QueueOptions(max_attempts=2, backoff=NO_WAIT)
    )
    yield setup
    setup.ex.close()  # type: ignore[attr-defined]


def burst(setup: Setup, error: str) -> WorkerStats:
    """Run a burst whose handler raises ValueError(error); fail if it does not end."""

    def handle(m: Message) -> None:
        raise ValueError(error)

    worker = Worker([Consumer(setup.binding(), handle)], burst=True)
    result: list[WorkerStats] = []
    thread = threading.Thread(target=lambda: result.append(worker.run(handle_signals=False)))
    thread.start()
    thread.join(PATIENCE)
    if thread.is_alive():
        worker.stop()
        thread.join(PATIENCE)
        pytest.fail("the burst did not end")
    return result[0]


def refuse_errors(setup: Setup, like: str) -> None:
    """A trigger that refuses every update of a last_error LIKE ``like``: a real database
    error that is not an outage."""
    table = setup.queue.spec.table
    if setup.kind == "pg":
        setup.ex.execute(
            f'CREATE FUNCTION "{table}_refuse"() RETURNS trigger LANGUAGE plpgsql AS '
            "$$ BEGIN RAISE EXCEPTION 'refused by a trigger'; END $$",
            {},
        )
        what = f'EXECUTE FUNCTION "{table}_refuse"()'
        setup.ex.execute(
            f'CREATE TRIGGER "{table}_refuse" BEFORE UPDATE OF last_error ON "{table}" '
            f"FOR EACH ROW WHEN (NEW.last_error LIKE '{like.replace('%', '%%')}') {what}",
            {},
        )
    else:
        setup.ex.execute(
            f'CREATE TRIGGER "{table}_refuse" BEFORE UPDATE OF last_error ON "{table}" '
            f"WHEN NEW.last_error LIKE '{like}' "
            "BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END",
            {},
        )


@pytest.mark.parametrize(
    ("error", "stored"),
    [("bad\x00byte", "bad\\x00byte"), ("lone \ud800 half", "lone \\ud800 half")],
    ids=["nul", "lone-surrogate"],
)
def test_an_error_text_the_database_cannot_store_fails_the_item_escaped(
    db: Setup, error: str, stored: str
) -> None:
    db.push(1)
    stats = burst(db, error)
    assert (stats.retried, stats.failed, stats.database_errors) == (1, 1, 0)
    assert db.states() == Counter({State.FAILED: 1})
    (text,) = db.errors()
    assert text is not None and f"ValueError: {stored}" in text


def test_a_refused_error_text_is_replaced_by_a_fixed_one(
    db: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    refuse_errors(db, "%poison%")
    db.push(1)
    stats = burst(db, "poison")
    assert (stats.retried, stats.failed) == (1, 1)
    assert db.states() == Counter({State.FAILED: 1})
    (text,) = db.errors()
    assert text is not None and text.startswith(REFUSED_ERROR)
    refused = [r for r in caplog.records if "refused the failure" in r.getMessage()]
    assert refused and refused[0].exc_info is not None  # logged with the driver's traceback


def test_a_failure_refused_even_with_the_fixed_text_is_left_to_its_lease(db: Setup) -> None:
    refuse_errors(db, "%")
    db.push(1)
    stats = burst(db, "anything")
    assert stats.database_errors == 2  # the failure, then its fallback: no retry loop
    assert db.states() == Counter({State.LEASED: 1})  # delivered again once the lease ends
    assert (stats.lost_leases, stats.retried, stats.failed) == (0, 0, 0)
