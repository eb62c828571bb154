"""``QueueMixin`` and ``RingQueueMixin``: a queue declared as a mapped class.

::

    class OrderConfirmation(QueueMixin, Base):
        __tablename__ = "order_confirmation"
        __queue_options__ = {"max_attempts": 5}
        order_id: Mapped[int]
        email: Mapped[str] = mapped_column(String(254))

When the class is mapped, the mixin validates the declaration into a core
:class:`~dbqueue.spec.QueueSpec` (a bad one raises :class:`~dbqueue.errors.InvalidSpec` at the
class statement) and adds the layout's other tables to the class's ``MetaData``, so
``metadata.create_all()`` and Alembic's autogenerate see everything. ``Model.queue`` is the
queue API (:class:`dbqueue_sa.queue.SAQueue`).
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any, ClassVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.orm import Mapped, Mapper, mapped_column, object_session

from dbqueue.errors import InvalidArgument, InvalidSpec
from dbqueue.schema import RING_BASE_COLUMNS, SPLIT_BASE_COLUMNS
from dbqueue.spec import QueueSpec
from dbqueue_sa import orm
from dbqueue_sa.spec import (
    RING_BASE_KINDS,
    SPLIT_BASE_KINDS,
    build_spec,
    check_base_columns,
    check_ring_columns,
    check_table,
    payload_columns,
    payload_names,
    to_field,
)
from dbqueue_sa.tables import (
    dialect_types,
    failed_table,
    group_tables,
    guard_ddl,
    head_table,
    meta_table,
    now,
    ring_events,
    ring_group_tables,
)

if TYPE_CHECKING:
    from dbqueue_sa.queue import SAQueue
    from dbqueue_sa.ring_queue import RingSAQueue

#: Every concrete queue class, by its table name (the CLI's and Alembic's registry).
QUEUE_CLASSES: dict[tuple[int, str], type[Any]] = {}


class QueueDescriptor:
    """``Model.queue``: the queue API of the class it is read from (one per class)."""

    def __get__[M](self, instance: object, owner: type[M]) -> SAQueue[M]:
        queue = owner.__dict__.get("_dbqueue_queue")
        if queue is None:
            raise TypeError(f"{owner.__name__} is not a mapped queue class")
        return queue  # type: ignore[no-any-return]


class RingQueueDescriptor(QueueDescriptor):
    """``Model.queue`` of a ring class, typed as the ring's API (``check()``)."""

    def __get__[M](self, instance: object, owner: type[M]) -> RingSAQueue[M]:
        return super().__get__(instance, owner)  # type: ignore[return-value]


def _refuse_bare_table(cls: type[Any]) -> None:
    """A class that brings its own ``__table__`` must have the mixin's columns in it:
    declarative cannot add them to a given Table (its error, "Can't add additional column",
    would not say which to declare)."""
    table = cls.__dict__.get("__table__")
    if not isinstance(table, sa.Table):
        return
    base = RING_BASE_COLUMNS if issubclass(cls, RingQueueMixin) else SPLIT_BASE_COLUMNS
    missing = sorted(name for name in base if name not in table.columns)
    if missing:
        raise InvalidSpec(
            f"{cls.__name__}: its __table__ {table.name!r} lacks the queue's columns "
            f"{', '.join(map(repr, missing))}; declare them in the Table as the mixin does "
            f"(see {'RingQueueMixin' if issubclass(cls, RingQueueMixin) else 'QueueMixin'}), or "
            f"use __tablename__ and let the mixin add them"
        )


class _QueueBase:
    """What both mixins share: the options, the spec, ``queue``."""

    #: Queue options (see :class:`dbqueue.QueueOptions`): ``max_attempts``, ``lease``,
    #: ``backoff``, ``notify_interval``..., for a split queue ``keep_done`` and unique items
    #: (``unique``: mapped attributes, such as ``("order_id",)``; ``unique_scope``,
    #: ``unique_period``: see :mod:`dbqueue.unique`), and for a ring ``capacity`` (required),
    #: ``when_full``, ``push_timeout``, ``hole_timeout``, ``stranded_after``.
    __queue_options__: ClassVar[dict[str, Any]] = {}
    #: The validated core spec, set when the class is mapped.
    __queue_spec__: ClassVar[QueueSpec]
    queue: ClassVar[QueueDescriptor] = QueueDescriptor()

    def __init_subclass__(cls, **kw: Any) -> None:
        # Refused before the declarative base maps the subclass: single-table inheritance
        # would first add the subclass's columns to the parent's table, behind its queue.
        if not cls.__dict__.get("__abstract__", False):
            parent = next((b for b in cls.__mro__[1:] if "_dbqueue_queue" in b.__dict__), None)
            if parent is not None:
                raise _inherited(cls, parent)
            _refuse_bare_table(cls)
        super().__init_subclass__(**kw)


class QueueMixin(_QueueBase):
    """A split queue: the class's table holds the payload, a generated ``<table>_meta``
    table the delivery state, and a generated ``<table>_head`` table where each priority's
    ready items begin (see docs/explanation/design.md)."""

    id: Mapped[int] = mapped_column(
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
        sa.Identity(),
        primary_key=True,
        sort_order=-3,
    )
    enqueued_at: Mapped[dt.datetime] = mapped_column(
        sa.DateTime(timezone=True), server_default=now(), sort_order=-2
    )
    last_error: Mapped[str | None] = mapped_column(sa.Text(), sort_order=-1)

    #: The generated meta table (``<table>_meta``), set when the class is mapped; a queue
    #: with consumer groups (``__queue_options__ = {"groups": ("email", ...)}``) has none.
    __queue_meta__: ClassVar[sa.Table]
    #: The generated meta table of each consumer group (``<table>_meta_<group>``), by group
    #: name, set when the class is mapped; empty for a queue without groups.
    __queue_group_tables__: ClassVar[dict[str, sa.Table]] = {}
    #: The generated head table of the meta table (``<table>_head``), set when the class is
    #: mapped; a queue with consumer groups has none.
    __queue_head__: ClassVar[sa.Table]
    #: The generated head table of each consumer group's meta table (``<table>_head_<group>``),
    #: by group name, set when the class is mapped; empty for a queue without groups.
    __queue_group_heads__: ClassVar[dict[str, sa.Table]] = {}

    if TYPE_CHECKING:
        # What a popped instance carries from the meta table (plain attributes, set by
        # SAQueue; declared for type checkers only, so declarative maps nothing of them).
        attempts: int
        priority: int
        run_at: dt.datetime
        lease_until: dt.datetime | None

    @property
    def cancel_requested(self) -> bool:
        """Whether this item was asked to stop (``Model.queue.cancel()`` while it was
        leased), asked on the session the instance belongs to. A popped instance is
        detached: ask ``Model.queue.on(session).cancel_requested(item)`` instead. A queue
        with consumer groups leases an item per group: ask the group,
        ``Model.queue.group(name).cancel_requested(session, item)``."""
        groups = type(self).__queue_spec__.options.groups
        if groups:
            raise InvalidArgument(
                f"{type(self).__name__} #{self.id} is delivered to each of its consumer groups "
                f"({', '.join(groups)}), and each may be asked to stop on its own: ask "
                f"{type(self).__name__}.queue.group({groups[0]!r}).cancel_requested(session, "
                f"item)"
            )
        session = object_session(self)
        if session is None:
            raise InvalidArgument(
                f"{type(self).__name__} #{self.id} belongs to no session; ask "
                f"{type(self).__name__}.queue.on(session).cancel_requested(item)"
            )
        return type(self).queue.cancel_requested(session, self)


class RingQueueMixin(_QueueBase):
    """A ring queue: a table of ``capacity`` preallocated slots rewritten in place, and a
    generated ``<table>_failed`` table (see docs/explanation/design.md, "the ring")."""

    slot: Mapped[int] = mapped_column(
        sa.Integer(), primary_key=True, autoincrement=False, sort_order=-7
    )
    seq: Mapped[int] = mapped_column(sa.BigInteger(), sort_order=-6)
    state: Mapped[int] = mapped_column(
        sa.SmallInteger(), server_default=sa.text("0"), sort_order=-5
    )
    attempts: Mapped[int] = mapped_column(
        sa.SmallInteger(), server_default=sa.text("0"), sort_order=-4
    )
    pushed_at: Mapped[dt.datetime | None] = mapped_column(sa.DateTime(timezone=True), sort_order=-3)
    lease_until: Mapped[dt.datetime | None] = mapped_column(
        sa.DateTime(timezone=True), sort_order=-2
    )
    last_error: Mapped[str | None] = mapped_column(sa.Text(), sort_order=-1)

    #: The generated failed table (``<table>_failed``), set when the class is mapped.
    __queue_failed__: ClassVar[sa.Table]
    #: A ring with consumer groups (``__queue_options__ = {"groups": (...)}``): each group's
    #: generated state table (``<table>_ring_<group>``) and side table
    #: (``<table>_side_<group>``), by group name, set when the class is mapped.
    __queue_group_tables__: ClassVar[dict[str, sa.Table]] = {}
    __queue_group_failed__: ClassVar[dict[str, sa.Table]] = {}
    queue: ClassVar[RingQueueDescriptor] = RingQueueDescriptor()

    @property
    def id(self) -> int:
        """The message's number (a popped message's token is ``(id, attempts)``)."""
        return self.seq


def _inherited(cls: type[Any], parent: type[Any]) -> InvalidSpec:
    return InvalidSpec(
        f"{cls.__name__}: a queue class cannot inherit the mapped class {parent.__name__} "
        f"(single- or joined-table inheritance: its queue would neither know the subclass's "
        f"columns nor fill them); share columns through an abstract base class "
        f"(__abstract__ = True) or a plain mixin, with one mapped class per queue table"
    )


def _setup_split(cls: type[Any], mapper: Mapper[Any], table: sa.Table) -> None:
    label = cls.__name__
    check_base_columns(table, SPLIT_BASE_KINDS, "id", label)
    payload = payload_columns(table, SPLIT_BASE_COLUMNS)
    fields = [to_field(c, label) for c in payload]
    spec = build_spec(cls, table, fields, ring=False, columns=payload_names(mapper, payload))
    table.dialect_options["sqlite"]["autoincrement"] = True  # ids are never reused
    dialect_types(table)
    cls.__queue_spec__ = spec
    if spec.fans_out:
        cls.__queue_group_tables__ = group_tables(spec, table)
        cls.__queue_group_heads__ = {
            group: head_table(spec.for_group(group), table) for group in spec.options.groups
        }
    else:
        cls.__queue_meta__ = meta_table(spec, table)
        cls.__queue_head__ = head_table(spec, table)
    from dbqueue_sa.queue import SAQueue

    cls._dbqueue_queue = SAQueue(cls)


def _setup_ring(cls: type[Any], table: sa.Table) -> None:
    label = cls.__name__
    check_base_columns(table, RING_BASE_KINDS, "slot", label)
    check_ring_columns(table, label)
    payload = payload_columns(table, RING_BASE_COLUMNS)
    fields = [to_field(c, label) for c in payload]
    spec = build_spec(cls, table, fields, ring=True)
    dialect_types(table)  # before the failed table copies the payload columns' types
    cls.__queue_spec__ = spec
    cls.__queue_failed__ = failed_table(spec, table, payload)
    if spec.fans_out:
        groups = ring_group_tables(spec, table, payload)
        cls.__queue_group_tables__ = {g: state for g, (state, _) in groups.items()}
        cls.__queue_group_failed__ = {g: side for g, (_, side) in groups.items()}
    for column in payload:
        # An empty slot holds no message: the core validates every push against the declared
        # nullability (the failed table's), the slot table accepts NULL.
        column.nullable = True
    ring_events(spec, table)
    from dbqueue_sa.ring_queue import RingSAQueue

    cls._dbqueue_queue = RingSAQueue(cls)


def _instrument(mapper: Mapper[Any], cls: type[Any]) -> None:
    if "_dbqueue_queue" in cls.__dict__:
        return
    if mapper.inherits is not None:
        # A queue class under a mapped parent (a subclass of a queue class is refused before
        # it is mapped, in _QueueBase.__init_subclass__, unless its base maps it otherwise).
        raise _inherited(cls, mapper.inherits.class_)
    if issubclass(cls, QueueMixin) and issubclass(cls, RingQueueMixin):
        raise InvalidSpec(
            f"{cls.__name__}: a queue class is either a QueueMixin or a RingQueueMixin, not both"
        )
    table = mapper.local_table
    assert isinstance(table, sa.Table)
    check_table(table, cls.__name__)
    if issubclass(cls, RingQueueMixin):
        _setup_ring(cls, table)
    else:
        _setup_split(cls, mapper, table)
    guard_ddl(table.metadata, *own_tables(cls))
    QUEUE_CLASSES[(id(table.metadata), table.name)] = cls


# Mapper events on the unmapped mixins reach every mapped subclass, whichever declarative
# style maps it (DeclarativeBase, declarative_base(), registry.mapped).
for _mixin in (QueueMixin, RingQueueMixin):
    event.listen(_mixin, "instrument_class", _instrument, propagate=True)
orm.install()  # what session.add(), session.delete() and bulk DML do on a queue class


def queue_classes(metadata: sa.MetaData | None = None) -> list[type[Any]]:
    """The mapped queue classes (of one ``MetaData``, or all), in declaration order."""
    return [
        cls
        for (meta_id, _), cls in QUEUE_CLASSES.items()
        if metadata is None or meta_id == id(metadata)
    ]


def own_tables(cls: type[Any]) -> list[sa.Table]:
    """The tables of a mapped queue class: its own, and those the mixin generated (meta and
    head, consumer groups' meta and head, failed, a ring's groups' state and side tables)."""
    generated = (
        cls.__dict__.get("__queue_meta__"),
        cls.__dict__.get("__queue_head__"),
        cls.__dict__.get("__queue_failed__"),
    )
    own = [
        cls.__table__,
        *cls.__dict__.get("__queue_group_tables__", {}).values(),
        *cls.__dict__.get("__queue_group_heads__", {}).values(),
        *cls.__dict__.get("__queue_group_failed__", {}).values(),
    ]
    return own + [t for t in generated if t is not None]
