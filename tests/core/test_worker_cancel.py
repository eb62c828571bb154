"""A worker's handler asked to stop: it sees ``cancel_requested``, and whatever the worker
does with the item then (its ack, or its fail if the handler gives up by raising) records it
cancelled, never retried."""

from __future__ import annotations

from collections import Counter

import pytest

from dbqueue.message import Message, State
from dbqueue.worker import Consumer, Worker
from tests.core.test_worker import Setup, db  # noqa: F401 - the fixture


def test_a_handler_sees_its_cancellation_and_the_ack_records_it(db: Setup) -> None:  # noqa: F811
    db.push(3)
    seen: dict[int, bool] = {}
    operator = db.connect()

    def handle(m: Message) -> None:
        if m.payload["n"] == 1:  # an operator cancels it while it runs
            assert db.queue.cancel(operator, [m.id]) == {m.id: "requested"}
        seen[m.payload["n"]] = db.queue.cancel_requested(operator, m)

    Worker([Consumer(db.binding(), handle, batch_size=3)], burst=True).run(handle_signals=False)
    assert seen == {0: False, 1: True, 2: False}
    assert db.states() == Counter({State.CANCELLED: 1})  # the others acked and gone


def test_a_handler_that_stops_by_raising_is_cancelled_not_retried(
    db: Setup,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    (item_id,) = db.push(1)
    operator = db.connect()
    calls = []

    def handle(m: Message) -> None:
        calls.append(m.id)
        db.queue.cancel(operator, [m.id])
        if db.queue.cancel_requested(operator, m):
            raise RuntimeError("stopped: cancelled")

    stats = Worker([Consumer(db.binding(), handle)], burst=True).run(handle_signals=False)
    assert calls == [item_id]  # never delivered again
    assert stats.failed == 1 and stats.handled == 0
    assert "failed (attempt 1/3); cancelled" in caplog.text
    assert db.states() == Counter({State.CANCELLED: 1})
    (error,) = db.errors()
    assert error is not None and error.endswith("RuntimeError: stopped: cancelled\n")
