"""``QueueMixin`` and ``RingQueueMixin``: what mapping a queue class adds (columns, the meta or
failed table, ``Model.queue``, the registry), the declarative styles that map one, inheritance,
and the table-level declarations a queue refuses at the class statement.

Classes are declared on fresh declarative bases (their own MetaData) unless they are the
shared test models.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import (
    DeclarativeBase,
    Mapped,
    Session,
    declarative_base,
    mapped_column,
    registry,
)

from dbqueue.errors import InvalidSpec
from dbqueue_sa import QueueMixin, RingQueueMixin, RingSAQueue, SAQueue, queue_classes
from dbqueue_sa.mixins import own_tables
from tests.sqlalchemy.models import Base, Job, Tick

pytestmark = pytest.mark.sqlalchemy


def fresh_base() -> type[DeclarativeBase]:
    class FreshBase(DeclarativeBase):
        pass

    return FreshBase


def round_trip(cls: Any, url: str) -> None:
    """Create the class's tables, push, pop, ack and drop them again on a real database."""
    engine = sa.create_engine(url)
    metadata = cls.__table__.metadata
    metadata.create_all(engine)
    try:
        with Session(engine) as session:
            item_id = cls.queue.push(session, name="x")
            session.commit()
            (item,) = cls.queue.pop_batch(session, 5)
            assert (type(item), item.id, item.name) == (cls, item_id, "x")
            assert cls.queue.ack(session, item) == [item_id]
            session.commit()
            assert cls.queue.stats(session)["ready"] == 0
    finally:
        metadata.drop_all(engine)
        engine.dispose()


# -- what a queue class gets --------------------------------------------------------------------


def test_the_split_mixin_adds_its_columns_and_the_meta_table() -> None:
    assert list(Job.__table__.c.keys())[:4] == ["id", "enqueued_at", "last_error", "name"]
    meta = Job.__queue_meta__
    assert Base.metadata.tables["sa_job_meta"] is meta
    assert list(meta.c.keys()) == ["id", "state", "priority", "run_at", "attempts", "lease_until"]
    spec = Job.__queue_spec__
    indexes = {str(i.name): i for i in meta.indexes}
    assert set(indexes) == {spec.index_name("ready"), spec.index_name("leased")}
    ready = indexes[spec.index_name("ready")]
    assert str(ready.dialect_options["postgresql"]["where"]) == "sa_job_meta.state = :state_1"
    assert ready.dialect_options["sqlite"]["where"] is not None
    table = Job.__table__
    assert isinstance(table, sa.Table)
    assert table.dialect_options["sqlite"]["autoincrement"] is True


def test_the_split_mixin_adds_the_head_table() -> None:
    head = Job.__queue_head__
    assert Base.metadata.tables["sa_job_head"] is head
    assert list(head.c.keys()) == ["priority", "run_at"]
    assert [c.name for c in head.primary_key] == ["priority"]
    assert head.c.priority.autoincrement is False
    assert isinstance(head.c.priority.type, sa.SmallInteger)
    assert isinstance(head.c.run_at.type, sa.DateTime) and head.c.run_at.type.timezone
    assert not head.c.run_at.nullable and head.c.run_at.server_default is None
    assert not head.indexes and Job.__queue_group_heads__ == {}
    assert head in own_tables(Job)


def test_a_head_table_whose_name_is_taken_is_refused() -> None:
    base = fresh_base()
    sa.Table("q_taken_head", base.metadata, sa.Column("id", sa.Integer, primary_key=True))
    with pytest.raises(InvalidSpec, match="its head table is named 'q_taken_head'"):

        class Taken(QueueMixin, base):  # type: ignore[valid-type, misc]
            __tablename__ = "q_taken"
            note: Mapped[str] = mapped_column(sa.Text())


def test_the_ring_mixin_adds_the_failed_table() -> None:
    keys = list(Tick.__table__.c.keys())
    assert keys[:7] == [
        "slot",
        "seq",
        "state",
        "attempts",
        "pushed_at",
        "lease_until",
        "last_error",
    ]
    failed = Tick.__queue_failed__
    assert Base.metadata.tables["sa_tick_failed"] is failed
    assert list(failed.c.keys()) == [
        "id", "state", "attempts", "pushed_at", "failed_at", "run_at", "lease_until",
        "last_error", "symbol", "price", "volume", "note",
    ]  # fmt: skip
    # An empty slot holds no message: the slot table's payload is nullable, the failed table
    # and the spec keep what was declared.
    assert all(Tick.__table__.c[n].nullable for n in ("symbol", "price", "volume", "note"))
    assert [failed.c[n].nullable for n in ("symbol", "price", "volume", "note")] == [
        False, False, False, True,
    ]  # fmt: skip
    assert [f.nullable for f in Tick.__queue_spec__.fields] == [False, False, False, True]
    assert Tick.__queue_spec__.options.capacity == 8


def test_model_queue_is_one_object_per_class() -> None:
    assert Job.queue is Job.queue and type(Job.queue) is SAQueue
    assert Tick.queue is Tick.queue and type(Tick.queue) is RingSAQueue
    assert Job.queue.model is Job and Job(name="x").queue is Job.queue
    assert Tick.queue.spec is Tick.__queue_spec__


def test_queue_classes_lists_the_mapped_queues() -> None:
    assert queue_classes(Base.metadata) == [Job, Tick]
    assert {Job, Tick} <= set(queue_classes())
    assert queue_classes(sa.MetaData()) == []


def test_two_metadata_with_the_same_table_name() -> None:
    first, second = fresh_base(), fresh_base()

    class One(QueueMixin, first):  # type: ignore[misc,valid-type]
        __tablename__ = "twin"
        name: Mapped[str]

    class Two(RingQueueMixin, second):  # type: ignore[misc,valid-type]
        __tablename__ = "twin"
        __queue_options__ = {"capacity": 4}
        code: Mapped[int]

    assert queue_classes(first.metadata) == [One] and queue_classes(second.metadata) == [Two]
    assert set(first.metadata.tables) == {"twin", "twin_meta", "twin_head"}
    assert set(second.metadata.tables) == {"twin", "twin_failed"}
    assert One.__queue_spec__.field_names == ("name",)
    assert Two.__queue_spec__.field_names == ("code",)
    assert {One, Two} <= set(queue_classes())


# -- declarative styles -----------------------------------------------------------------------


def test_declarative_base_legacy(url: str) -> None:
    legacy: Any = declarative_base()

    class Legacy(QueueMixin, legacy):  # type: ignore[misc]
        __tablename__ = "mix_legacy"
        name: Mapped[str] = mapped_column(sa.String(20))

    assert queue_classes(legacy.metadata) == [Legacy]
    round_trip(Legacy, url)


def test_registry_mapped(url: str) -> None:
    reg = registry()

    @reg.mapped
    class Decorated(QueueMixin):
        __tablename__ = "mix_decorated"
        name: Mapped[str]

    assert set(reg.metadata.tables) == {"mix_decorated", "mix_decorated_meta", "mix_decorated_head"}
    round_trip(Decorated, url)


def test_an_abstract_intermediate_class(url: str) -> None:
    base = fresh_base()

    class Tenant(QueueMixin, base):  # type: ignore[misc,valid-type]
        __abstract__ = True
        __queue_options__ = {"max_attempts": 2}
        tenant: Mapped[int] = mapped_column(default=0)

    class Mail(Tenant):
        __tablename__ = "mix_mail"
        name: Mapped[str]

    class Sms(Tenant):
        __tablename__ = "mix_sms"
        __queue_options__ = {"max_attempts": 9}
        name: Mapped[str]
        phone: Mapped[str | None]

    # The abstract class is not mapped: it has no table and no queue.
    with pytest.raises(TypeError, match="Tenant is not a mapped queue class"):
        Tenant.queue  # noqa: B018
    # The class's own columns come first, then the abstract base's (declarative's order).
    assert Mail.__queue_spec__.field_names == ("name", "tenant")
    assert Sms.__queue_spec__.field_names == ("name", "phone", "tenant")
    assert (Mail.__queue_spec__.options.max_attempts, Sms.__queue_spec__.options.max_attempts) == (
        2,
        9,
    )
    assert queue_classes(base.metadata) == [Mail, Sms]
    round_trip(Mail, url)


# -- inheritance ------------------------------------------------------------------------------


def test_single_table_inheritance_is_refused_and_the_parent_keeps_its_table(url: str) -> None:
    base = fresh_base()

    class Parent(QueueMixin, base):  # type: ignore[misc,valid-type]
        __tablename__ = "mix_parent"
        name: Mapped[str]
        kind: Mapped[str] = mapped_column(default="parent")
        __mapper_args__ = {"polymorphic_on": "kind", "polymorphic_identity": "parent"}

    with pytest.raises(InvalidSpec, match="Child: a queue class cannot inherit the mapped class"):

        class Child(Parent):
            __mapper_args__ = {"polymorphic_identity": "child"}
            extra: Mapped[int]

    # Refused before the subclass was mapped: its column never reached the parent's table.
    assert list(Parent.__table__.c.keys()) == ["id", "enqueued_at", "last_error", "name", "kind"]
    round_trip(Parent, url)


def test_joined_table_inheritance_is_refused() -> None:
    base = fresh_base()

    class Parent(QueueMixin, base):  # type: ignore[misc,valid-type]
        __tablename__ = "mix_joined"
        name: Mapped[str]

    with pytest.raises(InvalidSpec, match="abstract base class"):

        class Child(Parent):
            __tablename__ = "mix_joined_child"
            id: Mapped[int] = mapped_column(sa.ForeignKey("mix_joined.id"), primary_key=True)


def test_a_queue_class_under_a_mapped_parent_is_refused() -> None:
    base = fresh_base()

    class Plain(base):  # type: ignore[misc,valid-type]
        __tablename__ = "mix_plain"
        id: Mapped[int] = mapped_column(primary_key=True)
        kind: Mapped[str]
        __mapper_args__ = {"polymorphic_on": "kind", "polymorphic_identity": "plain"}

    with pytest.raises(InvalidSpec, match="cannot inherit the mapped class Plain"):

        class Queued(QueueMixin, Plain):
            __tablename__ = "mix_queued"
            __mapper_args__ = {"polymorphic_identity": "queued"}
            id: Mapped[int] = mapped_column(sa.ForeignKey(Plain.id), primary_key=True)


def test_both_mixins_are_refused() -> None:
    with pytest.raises(InvalidSpec, match="either a QueueMixin or a RingQueueMixin, not both"):

        class Both(RingQueueMixin, QueueMixin, fresh_base()):  # type: ignore[misc,override]
            __tablename__ = "mix_both"
            __queue_options__ = {"capacity": 4}
            code: Mapped[int]


# -- table-level declarations a queue refuses ---------------------------------------------------


def test_a_table_in_a_schema_is_refused() -> None:
    with pytest.raises(InvalidSpec, match="Scoped: table 'mix_scoped' is in schema 'other'"):

        class Scoped(QueueMixin, fresh_base()):  # type: ignore[misc]
            __tablename__ = "mix_scoped"
            __table_args__ = {"schema": "other"}
            name: Mapped[str]

    class SchemaBase(DeclarativeBase):
        metadata = sa.MetaData(schema="other")

    with pytest.raises(InvalidSpec, match="set search_path to use another"):

        class Defaulted(QueueMixin, SchemaBase):
            __tablename__ = "mix_scoped"
            name: Mapped[str]


def test_another_primary_key_is_refused() -> None:
    for mixin, key in ((QueueMixin, "'id'"), (RingQueueMixin, "'slot'")):
        with pytest.raises(InvalidSpec, match=f"primary key is the mixin's {key} column"):

            class Keyed(mixin, fresh_base()):  # type: ignore[misc,valid-type]
                __tablename__ = "mix_keyed"
                __queue_options__ = {"capacity": 4} if mixin is RingQueueMixin else {}
                code: Mapped[str] = mapped_column(sa.String(10), primary_key=True)


def test_a_table_named_as_a_generated_one_is_refused_by_name() -> None:
    base = fresh_base()
    sa.Table("mix_taken_meta", base.metadata, sa.Column("x", sa.Integer(), primary_key=True))
    with pytest.raises(InvalidSpec, match=r"its meta table is named 'mix_taken_meta', and a "):

        class Taken(QueueMixin, base):  # type: ignore[misc,valid-type]
            __tablename__ = "mix_taken"
            name: Mapped[str]


def test_a_table_without_the_mixin_columns_is_refused_naming_them() -> None:
    base = fresh_base()
    table = sa.Table(
        "mix_bare", base.metadata,
        sa.Column("id", sa.BigInteger(), primary_key=True), sa.Column("name", sa.String(10)),
    )  # fmt: skip
    with pytest.raises(InvalidSpec, match=r"lacks the queue's columns 'enqueued_at', 'last_error'"):

        class Bare(QueueMixin, base):  # type: ignore[misc,valid-type]
            __table__ = table


class UUIDKey:
    """A mixin some applications put on every table."""

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)


def test_a_layout_column_redeclared_with_another_type_is_refused() -> None:
    # UUIDKey comes first in the MRO, so its id wins over the queue's.
    with pytest.raises(InvalidSpec, match=r"column 'id' belongs to the queue .* declared as Uuid"):

        class Keyed(UUIDKey, QueueMixin, fresh_base()):  # type: ignore[misc]
            __tablename__ = "mix_uuid"
            name: Mapped[str]

    with pytest.raises(InvalidSpec, match="column 'pushed_at' belongs to the queue"):

        class Pushed(RingQueueMixin, fresh_base()):  # type: ignore[misc]
            __tablename__ = "mix_pushed"
            __queue_options__ = {"capacity": 4}
            pushed_at: Mapped[str] = mapped_column(sa.Text())  # type: ignore[assignment]


def declare_ring(columns: dict[str, Any], table_args: Any = ()) -> type[Any]:
    namespace: dict[str, Any] = {
        "__tablename__": "mix_ring",
        "__module__": __name__,
        "__queue_options__": {"capacity": 4},
        "__table_args__": table_args,
        "__annotations__": dict.fromkeys(columns, Mapped[int]),
        **columns,
    }
    return type("Ring", (RingQueueMixin, fresh_base()), namespace)


@pytest.mark.parametrize(
    ("columns", "table_args", "says"),
    [
        (
            {"user_id": mapped_column(sa.ForeignKey("users.id"))},
            (),
            "column 'user_id' is a foreign key; a ring queue's payload cannot hold a relation",
        ),
        ({"code": mapped_column(unique=True)}, (), "column(s) 'code' have a unique constraint"),
        ({"code": mapped_column(index=True)}, (), "column(s) 'code' have a unique constraint"),
        ({"code": mapped_column()}, (sa.Index("ix_code", "code"),), "column(s) 'code' have"),
        ({"code": mapped_column()}, (sa.UniqueConstraint("code"),), "column(s) 'code' have"),
        ({"code": mapped_column()}, (sa.Index("ix_state", "state"),), "column(s) 'state' have"),
        ({"failed_at": mapped_column()}, (), "column 'failed_at' uses a name the failed table"),
        ({"id": mapped_column()}, (), "column 'id' uses a name the failed table needs"),
    ],
    ids=[
        "fk",
        "unique",
        "index",
        "table-index",
        "table-unique",
        "index-on-state",
        "failed_at",
        "id",
    ],
)
def test_ring_columns_a_slot_cannot_hold(
    columns: dict[str, Any], table_args: Any, says: str
) -> None:
    with pytest.raises(InvalidSpec, match="Ring: ") as caught:
        declare_ring(columns, table_args)
    assert says in str(caught.value)


def test_a_split_queue_takes_indexes_and_foreign_keys() -> None:
    base = fresh_base()

    class Customer(base):  # type: ignore[misc,valid-type]
        __tablename__ = "mix_customer"
        id: Mapped[int] = mapped_column(primary_key=True)

    class Mail(QueueMixin, base):  # type: ignore[misc,valid-type]
        __tablename__ = "mix_indexed"
        __table_args__ = (sa.Index("ix_mix_indexed_sent", "sent_at"),)
        customer_id: Mapped[int] = mapped_column(sa.ForeignKey(Customer.id), index=True)
        sent_at: Mapped[dt.datetime | None] = mapped_column(sa.DateTime(timezone=True))

    assert Mail.__queue_spec__.field_names == ("customer_id", "sent_at")
