"""Consumer groups (fan-out) through the SQLAlchemy front: the declaration and its tables."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from dbqueue.errors import InvalidSpec
from dbqueue_sa import QueueMixin, RingQueueMixin
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


def test_a_ring_refuses_groups() -> None:
    class Base(DeclarativeBase):
        pass

    with pytest.raises(InvalidSpec, match="consumer groups"):

        class Feed(RingQueueMixin, Base):
            __tablename__ = "q_feed"
            __queue_options__ = {"capacity": 8, "groups": ("a",)}
            note: Mapped[str] = mapped_column(sa.Text())


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
    assert "sa_order_meta" not in names
