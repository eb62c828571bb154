"""``dbqueue cancel`` run as a subprocess, and ``cancel_requested`` on a mapped instance."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from dbqueue.errors import InvalidArgument
from dbqueue.message import State
from tests.sqlalchemy.cli_support import dbqueue, push_jobs, push_ticks
from tests.sqlalchemy.models import Job

pytestmark = pytest.mark.sqlalchemy


def states(engine: sa.Engine) -> dict[int, State]:
    meta = Job.__queue_meta__
    with engine.connect() as connection:
        return {i: State(s) for i, s in connection.execute(sa.select(meta.c.id, meta.c.state))}


def test_cancel_prints_each_outcome(engine: sa.Engine, url: str) -> None:
    leased, ready = push_jobs(engine, 2)
    with Session(engine) as session, session.begin():
        Job.queue.pop_batch(session, 1)
    done = dbqueue("cancel", "--url", url, "--queue", "sa_job", str(leased), str(ready), "999")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"{leased}: leased: cancellation requested (recorded when its worker settles it)",
        f"{ready}: cancelled: it will never run",
        "999: no such item",
    ]
    assert states(engine) == {leased: State.CANCELLING, ready: State.CANCELLED}


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--queue", "sa_job", "x"], 2, "not an item id: 'x' (ids are integers)"),
        (["--queue", "sa_job", "-3"], 2, "not an item id"),
        (["--queue", "nope", "1"], 2, "no queue 'nope' in this database"),
        (["--queue", "sa_tick", "1"], 1, "delivers in push order and has no cancellation"),
    ],
)
def test_cancel_refuses_bad_input_in_one_line(
    engine: sa.Engine, url: str, args: list[str], code: int, message: str
) -> None:
    push_ticks(engine, "T")  # the ring's tables exist and are found
    done = dbqueue("cancel", "--url", url, *args)
    assert done.returncode == code, done.stdout
    assert "Traceback" not in done.stderr
    assert message in done.stderr.strip().splitlines()[-1], done.stderr


def test_an_instance_in_a_session_tells_whether_it_was_asked_to_stop(engine: sa.Engine) -> None:
    (item_id,) = push_jobs(engine, 1)
    with Session(engine) as session:
        (popped,) = Job.queue.pop_batch(session, 1)
        session.commit()
        with pytest.raises(InvalidArgument, match=r"queue.on\(session\).cancel_requested"):
            _ = popped.cancel_requested  # popped instances are detached
        assert Job.queue.on(session).cancel_requested(popped) is False
        Job.queue.cancel(session, [item_id])
        job = session.get(Job, item_id)
        assert job is not None and job.cancel_requested is True
        Job.queue.ack(session, [popped])
        session.commit()
    assert states(engine) == {item_id: State.CANCELLED}


def test_purge_of_cancelled_items_takes_the_ended_cancelling_leases(
    engine: sa.Engine, url: str
) -> None:
    ended, running, waiting = push_jobs(engine, 3)
    with Session(engine) as session, session.begin():
        Job.queue.pop_batch(session, 2)  # ended and running: the first two
        Job.queue.cancel(session, [ended, running, waiting])
    meta = Job.__queue_meta__
    with engine.begin() as connection:  # the first one's worker died: its lease ended
        long_ago = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
        connection.execute(meta.update().where(meta.c.id == ended).values(lease_until=long_ago))
    done = dbqueue("purge", "--url", url, "--queue", "sa_job", "--state", "cancelled", "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "purged 2 cancelled item(s) of sa_job\n"
    assert states(engine) == {running: State.CANCELLING}
