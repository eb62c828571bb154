"""Unique items (issue 22 §2) through the SQLAlchemy front: the declaration (mapped attributes
or columns), the meta table's key column and index, pushes with declared fields and with keys
of their own, each scope, ``push_many``, the async methods, and pushers of one key racing in
open transactions through Sessions on PostgreSQL. What Alembic writes is in
test_unique_migrations.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from dbqueue.errors import InvalidArgument, InvalidSpec
from dbqueue.message import State
from dbqueue.unique import Pushed, UniqueScope
from dbqueue_sa import QueueMixin, RingQueueMixin
from tests.races import race_one_key
from tests.sqlalchemy.conftest import async_url
from tests.sqlalchemy.models import Job
from tests.sqlalchemy.unique_jobs import QueuedUniqueJob, StoredUniqueJob, UniqueBase, UniqueJob

pytestmark = pytest.mark.sqlalchemy


@pytest.fixture
def unique_engine(url: str) -> Iterator[sa.Engine]:
    """An engine with the unique queues' tables created (dropped afterwards)."""
    engine = sa.create_engine(url)
    UniqueBase.metadata.drop_all(engine)
    UniqueBase.metadata.create_all(engine)
    yield engine
    UniqueBase.metadata.drop_all(engine)
    engine.dispose()


@pytest.fixture
def session(unique_engine: sa.Engine) -> Iterator[Session]:
    """A session whose work the test commits (``autobegin``): each push in its transaction."""
    with Session(unique_engine) as session:
        yield session


def key_of(session: Session, item_id: int) -> str | None:
    meta = UniqueJob.__queue_meta__
    return session.scalar(sa.select(meta.c.unique_key).where(meta.c.id == item_id))


# -- the declaration ------------------------------------------------------------------------


def test_declared_names_are_the_cores_columns() -> None:
    class Base(DeclarativeBase):
        pass

    class Purchase(QueueMixin, Base):
        __tablename__ = "q_purchase"
        __queue_options__ = {"unique": ("order_ref", "note")}
        order_ref: Mapped[int] = mapped_column("order_id")
        note: Mapped[str]

    class ByColumn(QueueMixin, Base):
        __tablename__ = "q_by_column"
        __queue_options__ = {"unique": "order_id", "unique_scope": "stored"}
        order_ref: Mapped[int] = mapped_column("order_id")

    assert Purchase.queue.spec.options.unique == ("order_id", "note")
    assert ByColumn.queue.spec.options.unique == ("order_id",)
    assert ByColumn.queue.spec.options.unique_scope is UniqueScope.STORED
    meta = Purchase.__queue_meta__
    assert meta.c.unique_key.nullable and isinstance(meta.c.unique_key.type, sa.Text)
    (index,) = [i for i in meta.indexes if i.unique]
    assert index.name == Purchase.queue.spec.index_name("unique")
    assert [c.name for c in index.columns] == ["unique_key"]
    assert "unique_key" not in Job.__queue_meta__.c


def test_an_unknown_name_is_an_error_that_names_the_class() -> None:
    class Base(DeclarativeBase):
        pass

    with pytest.raises(InvalidSpec, match=r"Refund\.__queue_options__: unique names 'amount'"):

        class Refund(QueueMixin, Base):
            __tablename__ = "q_refund"
            __queue_options__ = {"unique": ("order_id", "amount")}
            order_id: Mapped[int]


def test_a_ring_refuses_unique_items() -> None:
    class Base(DeclarativeBase):
        pass

    with pytest.raises(InvalidSpec, match="split queue"):

        class Ring(RingQueueMixin, Base):
            __tablename__ = "q_unique_ring"
            __queue_options__ = {"capacity": 4, "unique": ("order_id",)}
            order_id: Mapped[int]


# -- pushes -------------------------------------------------------------------------------


def test_a_push_of_the_same_fields_returns_the_item_already_there(session: Session) -> None:
    first = UniqueJob.queue.push(session, account="acme", note="first")
    again = UniqueJob.queue.push(session, account="acme", note="second")
    other = UniqueJob.queue.push(session, account="acme", kind="bill")
    session.commit()
    assert isinstance(first, Pushed) and not first.duplicate
    assert again == first and again.duplicate
    assert other != first and not other.duplicate
    assert UniqueJob.queue.count(session) == 2
    assert session.get(UniqueJob, first).note == "first"  # type: ignore[union-attr]
    assert key_of(session, first) == '{"account":"acme","kind":"sync"}'


def test_a_key_of_its_own_replaces_the_fields(session: Session) -> None:
    first = UniqueJob.queue.push(session, account="acme", unique_key="nightly")
    again = UniqueJob.queue.on(session).push(account="other", unique_key="nightly")
    assert again == first and again.duplicate
    assert key_of(session, first) == "nightly"
    with pytest.raises(InvalidArgument, match="unique_key must be a non-empty str"):
        UniqueJob.queue.push(session, account="acme", unique_key="")


def test_a_queue_without_unique_items_refuses_a_key(session: Session) -> None:
    with pytest.raises(InvalidArgument, match="has no unique items"):
        Job.queue.push(session, name="m", unique_key="k")


def test_a_duplicate_push_that_rolls_back_leaves_the_holder(session: Session) -> None:
    first = UniqueJob.queue.push(session, account="acme")
    session.commit()
    assert UniqueJob.queue.push(session, account="acme").duplicate
    session.rollback()
    assert UniqueJob.queue.push(session, account="acme") == first


def test_push_many_reports_duplicates_in_and_out_of_the_batch(session: Session) -> None:
    held = UniqueJob.queue.push(session, account="a")
    pushed = UniqueJob.queue.push_many(
        session,
        [{"account": "a"}, {"account": "b"}, {"account": "b", "note": "later"}, {"account": "c"}],
    )
    session.commit()
    assert [p.duplicate for p in pushed] == [True, False, True, False]
    assert pushed[0] == held and pushed[2] == pushed[1]
    assert UniqueJob.queue.count(session) == 3


@pytest.mark.anyio
async def test_the_async_methods_take_a_key_too(unique_engine: sa.Engine, url: str) -> None:
    aengine = create_async_engine(async_url(url))
    try:
        async with AsyncSession(aengine) as session:
            first = await UniqueJob.queue.apush(session, account="a", unique_key="k")
            again = await UniqueJob.queue.apush(session, account="b", unique_key="k")
            many = await UniqueJob.queue.apush_many(session, [{"account": "a"}] * 2)
            await session.commit()
    finally:
        await aengine.dispose()
    assert not first.duplicate and again.duplicate and again == first
    assert [p.duplicate for p in many] == [False, True]


# -- scopes -------------------------------------------------------------------------------


def test_unfinished_holds_the_key_while_leased_and_frees_it_when_done(session: Session) -> None:
    q = UniqueJob.queue.on(session)
    first = q.push(account="acme")
    session.commit()
    leased = q.pop_batch(1)
    session.commit()
    assert q.push(account="acme") == first
    q.ack(leased)
    session.commit()
    second = q.push(account="acme")
    assert second != first and not second.duplicate


def test_unfinished_frees_the_key_of_a_failed_item(session: Session) -> None:
    q = UniqueJob.queue.on(session)
    first = q.push(account="acme")
    session.commit()
    for _ in range(2):  # max_attempts = 2, no back-off
        q.fail(q.pop_batch(1), "boom")
        session.commit()
    assert q.count(State.FAILED) == 1
    second = q.push(account="acme")
    assert second != first and not second.duplicate
    assert q.retry([first]) == 0  # its key is held again: it stays failed


def test_queued_frees_the_key_at_the_lease(session: Session) -> None:
    q = QueuedUniqueJob.queue.on(session)
    first = q.push(tag="t")
    assert q.push(tag="t") == first
    session.commit()
    q.pop_batch(1)
    session.commit()
    second = q.push(tag="t")
    assert second != first and not second.duplicate


def test_stored_holds_a_given_key_until_the_row_is_gone(session: Session) -> None:
    q = StoredUniqueJob.queue.on(session)
    first = q.push(tag="t", unique_key="once")
    session.commit()
    q.ack(q.pop_batch(1))  # kept as done (keep_done)
    session.commit()
    again = q.push(tag="t", unique_key="once")
    assert again == first and again.duplicate
    assert not q.push(tag="t").duplicate  # no declared fields: no key, no dedup
    assert not q.push(tag="t").duplicate
    q.delete([first])
    assert not q.push(tag="t", unique_key="once").duplicate


# -- pushers racing -------------------------------------------------------------------------


@pytest.mark.postgresql
@pytest.mark.parametrize("backend", ["postgresql"])
def test_pushers_of_one_key_in_open_transactions_make_one_item(unique_engine: sa.Engine) -> None:
    """Six threads, each with a Session of its own, push one key in ``session.begin()``
    (tests/races.py): no error, one item, every push returns it."""

    def push(hold: Callable[[Pushed], None]) -> None:
        with Session(unique_engine) as session, session.begin():
            hold(UniqueJob.queue.push(session, account="race"))

    url = unique_engine.url.set(drivername="postgresql")
    conninfo = {"conninfo": url.render_as_string(hide_password=False)}
    race_one_key(6, conninfo, UniqueJob.__queue_meta__.name, push)
    with Session(unique_engine) as session:
        assert UniqueJob.queue.count(session) == 1
        assert session.scalar(sa.select(sa.func.count()).select_from(UniqueJob)) == 1
