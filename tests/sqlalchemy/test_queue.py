"""``Model.queue`` of a split queue on a Session, on real PostgreSQL and SQLite: the delivery
modes inside and outside transactions, instances, the keywords a push takes, every operation,
items()/failed() queries, Connections and binds, missing tables and bad input.

What is committed is read from another connection (``committed``), not through the session.
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import (
    DeclarativeBase,
    Mapped,
    Session,
    mapped_column,
    scoped_session,
    sessionmaker,
)

from dbqueue.errors import (
    InvalidArgument,
    InvalidPayload,
    NotLeased,
    PayloadTooLarge,
    QueueTableMissing,
    TransactionStateError,
)
from dbqueue.message import RescueResult, State
from dbqueue_sa import QueueMixin
from tests.sqlalchemy.models import Job, Tick

pytestmark = pytest.mark.sqlalchemy
ZERO = dt.timedelta(0)
STATS_KEYS = {
    "ready", "scheduled", "leased", "expired", "done", "failed", "cancelled", "oldest_ready_age"
}  # fmt: skip
AT = dt.datetime(2030, 5, 6, 7, 8, 9, 123456, tzinfo=dt.UTC)
FULL: dict[str, Any] = {
    "name": "full",
    "n": 7,
    "doc": {"k": [1, 2.5, None, "x"], "nested": {"a": True}},
    "at": AT,
    "amount": decimal.Decimal("123.45"),
    "uid": uuid.UUID(int=42),
    "blob": b"\x00\xffbytes",
    "flag": True,
    "small": 3,
}


@pytest.fixture
def session(engine: sa.Engine) -> Iterator[Session]:
    with Session(engine) as session:
        yield session


@pytest.fixture
def committed(engine: sa.Engine) -> Callable[..., int]:
    """Rows another connection sees: in the data table, or in the meta table in ``state``."""

    def count(state: State | None = None) -> int:
        sql = "SELECT count(*) FROM sa_job"
        if state is not None:
            sql = f"SELECT count(*) FROM sa_job_meta WHERE state = {int(state)}"
        with engine.connect() as conn:
            return int(conn.exec_driver_sql(sql).scalar_one())

    return count


def make_failed(session: Session, name: str) -> int:
    """Push an item and fail it max_attempts (3) times without back-off: it ends up failed."""
    item_id = Job.queue.push(session, name=name)
    for attempt in (1, 2, 3):
        (job,) = Job.queue.pop_batch(session)
        state = Job.queue.fail(session, job, f"{name}: attempt {attempt}", delay=ZERO)
        assert state == {item_id: State.FAILED if attempt == 3 else State.READY}
    session.commit()
    return item_id


# -- instances ------------------------------------------------------------------------------


def test_pop_batch_returns_detached_instances(session: Session) -> None:
    first = Job.queue.push(session, name="first", priority=5)
    Job.queue.push(session, name="second")
    session.commit()
    jobs = Job.queue.pop_batch(session, 5, lease=dt.timedelta(seconds=40))
    assert [type(j) for j in jobs] == [Job, Job]
    job = jobs[0]
    assert (job.id, job.name, job.n, job.flag, job.doc, job.last_error) == (
        first, "first", 0, False, None, None,
    )  # fmt: skip
    assert (job.attempts, job.priority) == (1, 5)
    assert job.lease_until is not None
    assert job.lease_until - job.run_at >= dt.timedelta(seconds=40)
    assert job.enqueued_at.utcoffset() is not None
    # Detached, as if loaded by a closed session: its row exists, nothing tracks it.
    state = sa.inspect(job)
    assert state.detached and state.identity == (first,)
    assert job not in session
    merged = session.merge(job, load=False)
    assert merged.name == "first"


def test_every_kind_round_trips(session: Session) -> None:
    item_id = Job.queue.push(session, **FULL)
    session.commit()
    (via_query,) = session.scalars(sa.select(Job))
    (popped,) = Job.queue.pop_batch(session, mode="transactional")
    for job in (popped, via_query):
        assert {k: getattr(job, k) for k in FULL} == FULL and job.id == item_id


def test_push_takes_attribute_and_column_names(url: str) -> None:
    class Base(DeclarativeBase):
        pass

    class Renamed(QueueMixin, Base):
        __tablename__ = "q_renamed"
        title: Mapped[str] = mapped_column("headline", sa.String(20))

    engine = sa.create_engine(url)
    Base.metadata.create_all(engine)
    try:
        with Session(engine) as session:
            Renamed.queue.push(session, title="by attribute")
            Renamed.queue.push_many(session, [{"headline": "by column"}])
            with pytest.raises(InvalidPayload, match="its fields are headline"):
                Renamed.queue.push(session, heading="x")
            session.commit()
            popped = Renamed.queue.pop_batch(session, 5, mode="transactional")
            assert [r.title for r in popped] == ["by attribute", "by column"]
    finally:
        Base.metadata.drop_all(engine)
        engine.dispose()


# -- transactions ---------------------------------------------------------------------------


def test_a_push_commits_with_the_session(session: Session, committed: Callable[..., int]) -> None:
    Job.queue.push(session, name="a")
    assert committed() == 0
    session.commit()
    assert committed() == 1 and committed(State.READY) == 1


def test_a_push_rolled_back_with_the_session_is_gone(
    session: Session, committed: Callable[..., int]
) -> None:
    Job.queue.push(session, name="a")
    Job.queue.push_many(session, [{"name": "b"}, {"name": "c"}])
    session.rollback()
    assert committed() == committed(State.READY) == 0
    assert Job.queue.stats(session)["ready"] == 0


def test_a_push_and_an_orm_insert_commit_together(
    engine: sa.Engine, committed: Callable[..., int]
) -> None:
    orders = sa.Table("q_order", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True))
    orders.create(engine)
    try:
        for commit in (False, True):
            with Session(engine) as session:
                session.execute(orders.insert().values(id=int(commit) + 1))
                Job.queue.push(session, name="confirm")
                if commit:
                    session.commit()
        with engine.connect() as conn:
            assert conn.execute(sa.select(orders.c.id)).scalars().all() == [2]
        assert committed() == 1
    finally:
        orders.drop(engine)


def test_at_most_once_in_an_open_transaction_changes_nothing(
    session: Session, committed: Callable[..., int]
) -> None:
    Job.queue.push(session, name="a")
    session.commit()
    Job.queue.stats(session)  # the session has a transaction open again
    with pytest.raises(TransactionStateError, match=r"Commit first .* or use mode='transactional'"):
        Job.queue.pop_batch(session, mode="at_most_once")
    session.rollback()
    assert committed(State.READY) == 1


def test_at_most_once_on_a_fresh_session_commits_on_its_own(
    session: Session, committed: Callable[..., int]
) -> None:
    Job.queue.push_many(session, [{"name": "a"}, {"name": "b"}])
    session.commit()
    (job,) = Job.queue.pop_batch(session, 1, mode="at_most_once")
    assert job.name == "a" and not session.in_transaction()
    session.rollback()  # too late: the pop was committed
    assert committed() == 1 and committed(State.READY) == 1


def test_transactional_pop_commits_or_rolls_back_with_the_session(
    session: Session, committed: Callable[..., int]
) -> None:
    Job.queue.push_many(session, [{"name": "a"}, {"name": "b"}])
    session.commit()
    assert [j.name for j in Job.queue.pop_batch(session, 5, mode="transactional")] == ["a", "b"]
    session.rollback()
    assert committed() == 2
    assert len(Job.queue.pop_batch(session, 1, mode="transactional")) == 1
    session.commit()
    assert committed() == 1


def test_the_lease_is_taken_when_the_session_commits(
    session: Session, committed: Callable[..., int]
) -> None:
    Job.queue.push(session, name="a")
    session.commit()
    assert len(Job.queue.pop_batch(session)) == 1
    assert committed(State.LEASED) == 0
    session.rollback()
    assert committed(State.READY) == 1
    assert len(Job.queue.pop_batch(session)) == 1
    session.commit()
    assert committed(State.LEASED) == 1


def test_mode_names_are_checked(session: Session) -> None:
    with pytest.raises(InvalidArgument, match="unknown delivery mode 'exactly_once'"):
        Job.queue.pop_batch(session, mode="exactly_once")


# -- targets --------------------------------------------------------------------------------


def test_a_connection_instead_of_a_session(
    engine: sa.Engine, committed: Callable[..., int]
) -> None:
    with engine.begin() as conn:
        first = Job.queue.push(conn, name="a")
        Job.queue.push_many(conn, [{"name": "b"}, {"name": "c"}])
        with pytest.raises(TransactionStateError):
            Job.queue.pop_batch(conn, mode="at_most_once")
    with engine.connect() as conn:
        (job,) = Job.queue.pop_batch(conn, 1, mode="at_most_once")
        assert (type(job), job.id) == (Job, first) and not conn.in_transaction()
        assert [j.name for j in Job.queue.pop_batch(conn, 1, mode="transactional")] == ["b"]
        conn.rollback()
        (leased,) = Job.queue.pop_batch(conn)
        assert Job.queue.ack(conn, leased) == [leased.id]
        conn.commit()
    assert committed() == 1


def test_a_session_with_binds_runs_on_the_class_bind(
    engine: sa.Engine, tmp_path: Path, committed: Callable[..., int]
) -> None:
    other = sa.create_engine(f"sqlite:///{tmp_path / 'other.sqlite3'}")
    try:
        with Session(binds={Job: engine, Tick: other}) as session:
            Job.queue.push(session, name="a")
            session.commit()
        assert committed() == 1
        with Session(binds={Tick: other}) as session, pytest.raises(sa.exc.UnboundExecutionError):
            Job.queue.push(session, name="b")
    finally:
        other.dispose()


def test_something_else_than_a_session_is_refused(engine: sa.Engine) -> None:
    with pytest.raises(InvalidArgument, match=r"got Engine \(open one: with Session\(engine\)"):
        Job.queue.push(engine, name="a")  # type: ignore[arg-type]


def test_a_scoped_session_runs_on_its_current_session(engine: sa.Engine) -> None:
    """Flask-SQLAlchemy's ``db.session`` is a scoped_session."""
    scoped = scoped_session(sessionmaker(engine))
    try:
        pk = Job.queue.push(scoped, name="a")
        scoped.commit()
        (got,) = Job.queue.pop_batch(scoped, 1)
        assert (got.id, got.name) == (pk, "a")
        assert Job.queue.ack(scoped, [got]) == [pk]
        scoped.commit()
    finally:
        scoped.remove()


def test_an_at_most_once_pop_refuses_something_else_than_a_session(engine: sa.Engine) -> None:
    with pytest.raises(InvalidArgument, match="needs a Session or a Connection, got Engine"):
        Job.queue.pop_batch(engine, mode="at_most_once")  # type: ignore[arg-type]


def test_a_missing_table_raises_queue_table_missing(engine: sa.Engine, session: Session) -> None:
    Job.__queue_meta__.drop(engine)
    Job.__table__.drop(engine)  # type: ignore[attr-defined]
    Tick.queue.push(session, symbol="before", price=1)
    with pytest.raises(QueueTableMissing, match="queue 'sa_job': its tables do not exist"):
        Job.queue.push(session, name="a")
    session.rollback()
    # The session works again after the rollback (PostgreSQL aborted its transaction).
    Tick.queue.push(session, symbol="after", price=1)
    session.commit()
    with Session(engine) as other:
        assert Tick.queue.stats(other)["ready"] == 1


# -- bad input ------------------------------------------------------------------------------

NAMED = {"name": "a"}
BAD = [
    ({"name": "a", "colour": "red"}, {}, InvalidPayload, "unknown field(s) 'colour'"),
    ({"n": 1}, {}, InvalidPayload, "missing field(s) 'name'"),
    ({"name": "a", "n": "1"}, {}, InvalidPayload, "field 'n': expects an integer"),
    ({"name": "a" * 51}, {}, InvalidPayload, "field 'name': is 51 characters, max 50"),
    ({"name": "\ud800"}, {}, InvalidPayload, "field 'name'"),
    ({**NAMED, "small": -1}, {}, InvalidPayload, "field 'small': is out of range for smallint"),
    ({**NAMED, "at": dt.datetime(2030, 1, 1)}, {}, InvalidPayload, "field 'at'"),
    ({**NAMED, "doc": {"x": object()}}, {}, InvalidPayload, "field 'doc'"),
    ({**NAMED, "doc": "x" * 300_000}, {}, PayloadTooLarge, "more than max_payload_bytes=262144"),
    (NAMED, {"priority": 40_000}, InvalidArgument, "priority 40000 is out of range"),
    (NAMED, {"delay": -dt.timedelta(seconds=1)}, InvalidArgument, "delay must be"),
]
BAD_IDS = [
    "unknown", "missing", "wrong-type", "too-long", "lone-surrogate", "below-min", "naive",
    "not-json", "too-large", "priority", "negative-delay",
]  # fmt: skip


@pytest.mark.parametrize(("payload", "kw", "error", "says"), BAD, ids=BAD_IDS)
def test_bad_input_is_refused_and_writes_nothing(
    session: Session,
    committed: Callable[..., int],
    payload: dict[str, Any],
    kw: dict[str, Any],
    error: type[Exception],
    says: str,
) -> None:
    Job.queue.push(session, name="kept")
    with pytest.raises(error) as caught:
        Job.queue.push(session, **payload, **kw)
    assert says in str(caught.value)
    with pytest.raises(error):
        Job.queue.push_many(session, [{"name": "fine"}, payload], **kw)
    session.commit()  # the session carries on: what it did before the error is kept
    assert committed() == committed(State.READY) == 1


# -- operations -----------------------------------------------------------------------------


def test_ack_is_fenced_by_the_lease_token(session: Session) -> None:
    a, b = Job.queue.push_many(session, [{"name": "a"}, {"name": "b"}])
    session.commit()
    first, second = Job.queue.pop_batch(session, 2)
    assert Job.queue.ack(session, [first, (b, second.attempts)]) == [a, b]
    with pytest.raises(NotLeased, match=f"ack: item\\(s\\) {a} are not leased"):
        Job.queue.ack(session, first)
    assert Job.queue.ack(session, first, strict=False) == []
    session.commit()
    assert Job.queue.stats(session)["ready"] == 0


def test_ack_pop_acks_and_leases_the_next(session: Session) -> None:
    Job.queue.push_many(session, [{"name": n} for n in "abc"])
    session.commit()
    (a,) = Job.queue.pop_batch(session)
    acked, more = Job.queue.ack_pop(session, a, 5)
    assert acked == 1 and [(type(j), j.name) for j in more] == [(Job, "b"), (Job, "c")]
    session.commit()
    assert Job.queue.stats(session)["leased"] == 2


def test_fail_retries_then_fails_and_failed_is_a_query(session: Session) -> None:
    item_id = make_failed(session, "boom")
    rows = session.execute(Job.queue.failed()).all()
    assert len(rows) == 1
    job, attempts, failed_at = rows[0]
    assert (type(job), job.id, job.last_error, attempts) == (Job, item_id, "boom: attempt 3", 3)
    assert failed_at.utcoffset() is not None
    assert Job.queue.retry(session, [job]) == 1
    session.commit()
    (again,) = Job.queue.pop_batch(session)
    assert (again.id, again.attempts) == (item_id, 1)


def test_fail_with_an_exception_stores_its_type_and_message(session: Session) -> None:
    Job.queue.push(session, name="a")
    (job,) = Job.queue.pop_batch(session)
    assert Job.queue.fail(session, job, ValueError("bad value")) == {job.id: State.READY}
    session.commit()
    session.expire_all()
    assert session.get(Job, job.id).last_error == "ValueError: bad value"  # type: ignore[union-attr]
    assert Job.queue.stats(session)["scheduled"] == 1  # retried after the back-off


def test_extend_moves_the_lease(session: Session) -> None:
    Job.queue.push(session, name="a")
    (job,) = Job.queue.pop_batch(session, lease=dt.timedelta(seconds=5))
    assert Job.queue.extend(session, job, lease=dt.timedelta(hours=1)) == [job.id]
    session.commit()
    (row,) = session.execute(Job.queue.items("leased")).all()
    assert row.lease_until - job.lease_until > dt.timedelta(minutes=50)
    Job.queue.ack(session, job)
    assert Job.queue.extend(session, job) == []


def test_set_priority_changes_the_order(session: Session) -> None:
    a, b = Job.queue.push_many(session, [{"name": "a"}, {"name": "b"}])
    assert Job.queue.set_priority(session, [b], 9) == 1
    with pytest.raises(InvalidArgument, match="priority 99999 is out of range"):
        Job.queue.set_priority(session, a, 99_999)
    assert [j.id for j in Job.queue.pop_batch(session, 2)] == [b, a]


def test_rescue_brings_expired_leases_back(session: Session) -> None:
    Job.queue.push_many(session, [{"name": "a"}, {"name": "b"}])
    Job.queue.pop_batch(session, 2)
    # Expire the leases in the table rather than wait for them (on the session's connection:
    # the Session refuses a bulk update of a queue's meta table, see dbqueue_sa.orm).
    meta = Job.__queue_meta__
    past = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    session.connection().execute(sa.update(meta).values(lease_until=past))
    assert Job.queue.stats(session)["expired"] == 2
    assert Job.queue.rescue(session) == RescueResult(ready=2)
    assert [j.attempts for j in Job.queue.pop_batch(session, 2)] == [2, 2]


def test_stats_purge_and_delete(session: Session) -> None:
    ids = Job.queue.push_many(session, [{"name": n} for n in "abcd"])
    Job.queue.push(session, name="later", delay=dt.timedelta(hours=1))
    Job.queue.pop_batch(session)
    stats = Job.queue.stats(session)
    assert set(stats) == STATS_KEYS
    assert (stats["ready"], stats["scheduled"], stats["leased"]) == (3, 1, 1)
    assert stats["oldest_ready_age"] >= ZERO
    assert Job.queue.delete(session, ids[1]) == 1
    assert Job.queue.purge(session, "leased") == 1
    assert Job.queue.purge(session) == 3
    session.commit()
    assert session.scalar(sa.select(sa.func.count()).select_from(Job)) == 0


def test_items_is_a_query_by_state(session: Session) -> None:
    a, b, c = Job.queue.push_many(session, [{"name": n} for n in "abc"])
    Job.queue.pop_batch(session)
    session.commit()
    rows = session.execute(Job.queue.items()).all()
    assert [(r[0].id, State(r.state), r.attempts, r.priority) for r in rows] == [
        (a, State.LEASED, 1, 0), (b, State.READY, 0, 0), (c, State.READY, 0, 0),
    ]  # fmt: skip
    assert [j.id for j in session.scalars(Job.queue.items(State.READY))] == [b, c]
    assert [j.id for j in session.scalars(Job.queue.items(1))] == [a]
    with pytest.raises(InvalidArgument, match="unknown state 'gone'"):
        Job.queue.items("gone")
