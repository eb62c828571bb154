"""What a ``RingQueueModel`` declaration generates: the ``<Model>Failed`` model, the slot
table's nullable payload columns, and the :class:`~dbqueue_django.slots.RingSlots` index that
preallocates the slots; with consumer groups, each group's state model ``<Model>Ring_<group>``
(with the :class:`~dbqueue_django.slots.RingGroupRows` index that fills it) and side model
``<Model>Side_<group>``. All of it lands in the project's own migrations."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models.base import ModelBase

from dbqueue.errors import InvalidSpec
from dbqueue.message import State
from dbqueue.ring import SlotState
from dbqueue.ring.states import SideState
from dbqueue.schema import FAILED_BASE_COLUMNS, RING_BASE_COLUMNS
from dbqueue.spec import QueueOptions, QueueSpec, index_name
from dbqueue_django.generated import bind_to_module
from dbqueue_django.slots import RingGroupRows, RingSlots
from dbqueue_django.spec import groups_of, options_of, payload_fields

SLOT_STATES = [(int(s), s.name.lower()) for s in SlotState]
#: The states of a row of the side table (the failed model): waiting to be pushed again at the
#: tail (a retry's back-off, or put aside by a pusher or the sweeper), a lease a pusher moved
#: aside, failed for good, and spilled (pushed while the ring was full: its overflow).
SIDE_STATES = [
    (int(SideState.READY), "waiting"),
    (int(SideState.LEASED), "leased aside"),
    (int(SideState.FAILED), "failed"),
    (int(SideState.SPILLED), "spilled"),
]
#: The columns of every slot table, and of every failed table, besides the payload.
RING_BASE_FIELDS = RING_BASE_COLUMNS
FAILED_BASE_FIELDS = FAILED_BASE_COLUMNS


def group_spec(ring_model: type[models.Model], group: str) -> QueueSpec:
    """Consumer group ``group`` of ``ring_model``'s ring as far as its tables' names go (no
    payload, no options needed)."""
    return QueueSpec(ring_model._meta.db_table, (), QueueOptions(groups=(group,))).for_group(group)


def make_failed_model(
    ring_model: type[models.Model],
    payload: list[models.Field[Any, Any]],
    group: str | None = None,
) -> type[models.Model]:
    """Create and register ``<Model>Failed`` (table ``<table>_failed``): the ring's side table,
    the messages out of the ring keyed by their number (failed for good, waiting out a retry's
    back-off, leased aside, spilled from a full ring), with copies of the ring's ``payload``
    fields (made before the ring's own become nullable). For consumer group ``group`` of a
    ring with groups: the group's own side table, ``<Model>Side_<group>`` (table
    ``<table>_side_<group>``, as ``dbqueue.schema.group_ring_statements``)."""
    opts = ring_model._meta
    if group is None:
        table, name, indexed, of = f"{opts.db_table}_failed", "Failed", opts.db_table, ""
    else:
        spec = group_spec(ring_model, group)
        table, name, indexed = spec.failed_table, f"Side_{group}", spec.meta_table
        of = f" ({group})"

    class Meta:
        apps = opts.apps  # the ring model's registry (isolated test apps, historical models)
        app_label = opts.app_label
        db_table = table
        verbose_name = f"failed {opts.verbose_name}{of}"
        verbose_name_plural = f"failed {opts.verbose_name_plural}{of}"
        # The messages not failed for good: the sweeper finds the due ones through it (see
        # dbqueue.schema.waiting_index_statement).
        indexes = [
            models.Index(
                fields=["state", "run_at"],
                name=index_name(indexed, "waiting"),
                condition=~models.Q(state=int(State.FAILED)),
            )
        ]

    attrs: dict[str, Any] = {
        "__module__": ring_model.__module__,
        "__qualname__": f"{ring_model.__qualname__}{name}",
        "__doc__": f"The failed messages{of} of the ring queue {opts.label}.",
        "Meta": Meta,
        "id": models.BigIntegerField(primary_key=True, editable=False),
        "state": models.SmallIntegerField(
            choices=SIDE_STATES,
            default=int(State.FAILED),
            db_default=int(State.FAILED),
            editable=False,
        ),
        "attempts": models.SmallIntegerField(editable=False),
        "pushed_at": models.DateTimeField(null=True, blank=True, editable=False),
        "failed_at": models.DateTimeField(editable=False),
        "run_at": models.DateTimeField(null=True, blank=True, editable=False),
        "lease_until": models.DateTimeField(null=True, blank=True, editable=False),
        "last_error": models.TextField(null=True, blank=True, editable=False),
        "queue_base_fields": FAILED_BASE_FIELDS,
        "ring_model": ring_model,
        "queue_group": group,
        "__str__": lambda self: f"{self._meta.verbose_name} #{self.pk}",
    }
    # A payload field named like a failed column is refused by the spec (InvalidSpec).
    attrs.update({f.name: f.clone() for f in payload if f.name not in attrs})
    return bind_to_module(type(f"{ring_model.__name__}{name}", (models.Model,), attrs))


def make_group_state_model(ring_model: type[models.Model], group: str) -> type[models.Model]:
    """Create and register ``<Model>Ring_<group>`` (table ``<table>_ring_<group>``): consumer
    group ``group``'s own row of every slot of the ring, the slot's columns without the
    payload (``dbqueue.schema.group_ring_statements``), with the
    :class:`~dbqueue_django.slots.RingGroupRows` index that fills it.

    Its primary key is a one-to-one to the slot *without* a database constraint, like a split
    queue's meta model: the core keeps both tables consistent; the relation gives the ORM the
    join (``Model.objects.filter(ring_<group>__state=...)``) and orders the migration, the
    group's table created after the slots it copies."""
    opts = ring_model._meta
    spec = group_spec(ring_model, group)
    capacity = ring_capacity(ring_model)

    class Meta:
        apps = opts.apps
        app_label = opts.app_label
        db_table = spec.state_table
        verbose_name = f"{opts.verbose_name} slot state ({group})"
        indexes = (
            [] if capacity is None else [RingGroupRows.for_group(opts.db_table, group, capacity)]
        )

    attrs: dict[str, Any] = {
        "__module__": ring_model.__module__,
        "__qualname__": f"{ring_model.__qualname__}Ring_{group}",
        "__doc__": f"Consumer group {group!r}'s state of each slot of the ring {opts.label}.",
        "Meta": Meta,
        "slot": models.OneToOneField(
            ring_model,
            primary_key=True,
            db_column="slot",
            db_constraint=False,
            on_delete=models.DO_NOTHING,
            related_name=group_relation(group),
            editable=False,
        ),
        "seq": models.BigIntegerField(editable=False),
        "state": models.SmallIntegerField(
            choices=SLOT_STATES, default=0, db_default=0, editable=False
        ),
        "attempts": models.SmallIntegerField(default=0, db_default=0, editable=False),
        "pushed_at": models.DateTimeField(null=True, blank=True, editable=False),
        "lease_until": models.DateTimeField(null=True, blank=True, editable=False),
        "last_error": models.TextField(null=True, blank=True, editable=False),
        "__str__": lambda self: f"{self._meta.verbose_name} #{self.seq}",
    }
    return bind_to_module(type(f"{ring_model.__name__}Ring_{group}", (models.Model,), attrs))


def group_relation(group: str) -> str:
    """The name of the slot model's reverse one-to-one to consumer group ``group``'s state
    model: ``ring_<group>``."""
    return f"ring_{group}"


def ring_capacity(model: type[models.Model]) -> int | None:
    """The declared capacity, or None when the options are invalid (the system check reports
    them; the class itself must still be created)."""
    try:
        return options_of(model).capacity
    except InvalidSpec:
        return None


class RingQueueModelBase(ModelBase):
    """For each concrete ring model: the failed model, nullable payload columns in the slot
    table, and the ``RingSlots`` index; for a ring with consumer groups, each group's state
    and side models too. So ``makemigrations`` writes all of it."""

    def __new__(
        mcs, name: str, bases: tuple[type, ...], attrs: dict[str, Any], **kwargs: Any
    ) -> RingQueueModelBase:
        cls: Any = super().__new__(mcs, name, bases, attrs, **kwargs)
        opts = cls._meta
        if opts.abstract or opts.proxy or opts.swapped:
            return cls  # type: ignore[no-any-return]
        payload = payload_fields(cls)
        cls.failed_model = make_failed_model(cls, payload)
        groups = groups_of(cls)
        cls.queue_group_models = {g: make_group_state_model(cls, g) for g in groups}
        cls.queue_group_failed_models = {g: make_failed_model(cls, payload, g) for g in groups}
        for f in payload:
            # An empty slot holds no message: the core validates every push against the
            # declared nullability (the failed model's), the slot table accepts NULL.
            f.null = True
        capacity = ring_capacity(cls)
        if capacity is not None:
            opts.indexes.append(RingSlots.for_table(opts.db_table, capacity))
            # The migration state copies only the options the Meta class declared.
            opts.original_attrs["indexes"] = opts.indexes
        return cls  # type: ignore[no-any-return]
