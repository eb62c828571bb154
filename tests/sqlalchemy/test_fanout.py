"""Consumer groups (fan-out) through the SQLAlchemy front: the declaration and its tables,
``Model.queue.group(name)`` on a Session (push through the queue, pop, ack, fail and retry per
group, mapped instances), what the queue itself refuses, the queries and what the mapped
class reads per group. What Alembic writes is in test_fanout_migrations.py, the worker and
the command line in test_worker.py and test_cli.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from dbqueue.errors import InvalidArgument, InvalidSpec, UnsupportedOperation
from dbqueue.message import State
from dbqueue_sa import QueueMixin
from tests.sqlalchemy.fanout_jobs import GROUPS, FanoutBase, Order

pytestmark = pytest.mark.sqlalchemy


@pytest.fixture
def fanout_engine(url: str) -> Iterator[sa.Engine]:
    """An engine with the grouped queue's tables created (dropped afterwards)."""
    engine = sa.create_engine(url)
    FanoutBase.metadata.drop_all(engine)
    FanoutBase.metadata.create_all(engine)
    yield engine
    FanoutBase.metadata.drop_all(engine)
    engine.dispose()


@pytest.fixture
def session(fanout_engine: sa.Engine) -> Iterator[Session]:
    """A session whose work the test commits."""
    with Session(fanout_engine) as session:
        yield session


# -- the declaration ------------------------------------------------------------------------


def test_the_groups_reach_the_spec_and_each_has_a_table() -> None:
    spec = Order.__queue_spec__
    assert spec.options.groups == GROUPS and spec.fans_out
    tables = Order.__queue_group_tables__
    assert {g: t.name for g, t in tables.items()} == {
        "email": "sa_order_meta_email",
        "search": "sa_order_meta_search",
    }
    assert all(t.metadata is FanoutBase.metadata for t in tables.values())
    assert "sa_order_meta" not in FanoutBase.metadata.tables
    assert not hasattr(Order, "__queue_meta__")
    email = tables["email"]
    assert list(email.c.keys()) == [
        "id", "state", "priority", "run_at", "attempts", "lease_until", "last_error",
    ]  # fmt: skip
    assert {i.name for i in email.indexes} == {
        spec.for_group("email").index_name("ready"),
        spec.for_group("email").index_name("leased"),
    }


def test_each_group_has_a_head_table_and_the_queue_none() -> None:
    heads = Order.__queue_group_heads__
    assert {g: t.name for g, t in heads.items()} == {
        "email": "sa_order_head_email",
        "search": "sa_order_head_search",
    }
    assert all(FanoutBase.metadata.tables[t.name] is t for t in heads.values())
    assert all(list(t.c.keys()) == ["priority", "run_at"] for t in heads.values())
    assert "sa_order_head" not in FanoutBase.metadata.tables
    assert not hasattr(Order, "__queue_head__")


def test_a_group_table_whose_name_is_taken_is_refused() -> None:
    class Base(DeclarativeBase):
        pass

    sa.Table("q_taken_meta_a", Base.metadata, sa.Column("id", sa.Integer, primary_key=True))
    with pytest.raises(InvalidSpec, match="consumer group 'a' meta table"):

        class Taken(QueueMixin, Base):
            __tablename__ = "q_taken"
            __queue_options__ = {"groups": ("a", "b")}
            note: Mapped[str] = mapped_column(sa.Text())


def test_create_all_creates_a_table_per_group(fanout_engine: sa.Engine) -> None:
    names = set(sa.inspect(fanout_engine).get_table_names())
    assert {"sa_order", "sa_order_meta_email", "sa_order_meta_search"} <= names
    assert {"sa_order_head_email", "sa_order_head_search"} <= names
    assert "sa_order_meta" not in names and "sa_order_head" not in names


# -- the queue and its groups ---------------------------------------------------------------


def test_each_group_gets_each_item_once(session: Session) -> None:
    first = Order.queue.push(session, order_id=1, note="a")
    Order.queue.push_many(session, [{"order_id": 2}, {"order_id": 3}])
    session.commit()
    for group in GROUPS:
        popped = Order.queue.group(group).pop_batch(session, 10)
        session.commit()
        assert all(isinstance(o, Order) for o in popped)
        assert [o.order_id for o in popped] == [1, 2, 3]
        assert popped[0].id == first and popped[0].note == "a"
        assert Order.queue.group(group).pop_batch(session, 10) == []
    email = Order.queue.group("email")
    assert email.count(session) == 3
    assert email.stats(session)["leased"] == 3


def test_an_ack_in_one_group_leaves_the_other_groups_item(session: Session) -> None:
    Order.queue.push(session, order_id=7)
    session.commit()
    (email_item,) = Order.queue.group("email").pop_batch(session, 1)
    assert Order.queue.group("email").ack(session, [email_item]) == [email_item.id]
    session.commit()
    (search_item,) = Order.queue.group("search").pop_batch(session, 1)
    assert search_item.order_id == 7
    assert Order.queue.group("search").ack(session, [search_item]) == [search_item.id]
    session.commit()
    # The last group's ack removed the payload too.
    assert session.scalar(sa.select(sa.func.count()).select_from(Order)) == 0


def test_a_group_fails_and_retries_its_own_delivery(session: Session) -> None:
    Order.queue.push(session, order_id=9)
    session.commit()
    search = Order.queue.group("search")
    for _ in range(2):  # max_attempts
        (item,) = search.pop_batch(session, 1)
        search.fail(session, [item], "index down")
        session.commit()
    (row,) = session.execute(search.failed()).all()
    assert row[0].order_id == 9 and row.attempts == 2 and row.last_error == "index down"
    assert Order.queue.group("email").stats(session)["failed"] == 0
    assert search.retry(session, [row[0].id]) == 1
    session.commit()
    assert [o.order_id for o in search.pop_batch(session, 1)] == [9]


def test_the_items_query_reads_one_groups_state(session: Session) -> None:
    Order.queue.push(session, order_id=1)
    session.commit()
    Order.queue.group("email").pop_batch(session, 1)
    session.commit()
    email = session.execute(Order.queue.group("email").items()).all()
    search = session.execute(Order.queue.group("search").items()).all()
    assert [r.state for r in email] == [int(State.LEASED)]
    assert [r.state for r in search] == [int(State.READY)]
    assert isinstance(email[0][0], Order)


def test_the_queue_itself_refuses_what_a_group_does(session: Session) -> None:
    with pytest.raises(UnsupportedOperation, match=r"queue\.group"):
        Order.queue.pop_batch(session, 1)
    with pytest.raises(InvalidArgument, match=r"queue.group\('email'\).items"):
        Order.queue.items()
    with pytest.raises(UnsupportedOperation, match="does not push"):
        Order.queue.group("email").push(session, order_id=1)
    with pytest.raises(InvalidArgument, match="no consumer group 'sms'"):
        Order.queue.group("sms")


def test_session_delete_removes_the_item_from_every_group(session: Session) -> None:
    Order.queue.push(session, order_id=5)
    session.commit()
    (item,) = session.scalars(sa.select(Order)).all()
    session.delete(item)
    session.commit()
    assert [Order.queue.group(g).count(session) for g in GROUPS] == [0, 0]


def test_a_bulk_delete_of_a_group_table_is_refused(session: Session) -> None:
    with pytest.raises(InvalidArgument, match="bulk delete"):
        session.execute(sa.delete(Order.__queue_group_tables__["email"]))


def test_cancel_requested_on_an_instance_asks_for_a_group(session: Session) -> None:
    Order.queue.push(session, order_id=6)
    session.commit()
    (item,) = session.scalars(sa.select(Order)).all()
    with pytest.raises(InvalidArgument, match=r"queue.group\('email'\).cancel_requested"):
        _ = item.cancel_requested
    (leased,) = Order.queue.group("email").pop_batch(session, 1)
    session.commit()
    assert Order.queue.group("email").cancel_requested(session, leased) is False
