"""What a ``RingQueueModel`` declaration generates: the ``<Model>Failed`` model, the slot
table's nullable payload columns, and the :class:`~dbqueue_django.slots.RingSlots` index that
preallocates the slots. All of it lands in the project's own migrations."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models.base import ModelBase

from dbqueue.errors import InvalidSpec
from dbqueue.message import State
from dbqueue.ring import SlotState
from dbqueue.ring.states import SideState
from dbqueue.schema import FAILED_BASE_COLUMNS, RING_BASE_COLUMNS
from dbqueue.spec import index_name
from dbqueue_django.generated import bind_to_module
from dbqueue_django.slots import RingSlots
from dbqueue_django.spec import options_of, payload_fields

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


def make_failed_model(
    ring_model: type[models.Model], payload: list[models.Field[Any, Any]]
) -> type[models.Model]:
    """Create and register ``<Model>Failed`` (table ``<table>_failed``): the ring's side table,
    the messages out of the ring keyed by their number (failed for good, waiting out a retry's
    back-off, leased aside, spilled from a full ring), with copies of the ring's ``payload``
    fields (made before the ring's own become nullable)."""
    opts = ring_model._meta

    class Meta:
        apps = opts.apps  # the ring model's registry (isolated test apps, historical models)
        app_label = opts.app_label
        db_table = f"{opts.db_table}_failed"
        verbose_name = f"failed {opts.verbose_name}"
        verbose_name_plural = f"failed {opts.verbose_name_plural}"
        # The messages not failed for good: the sweeper finds the due ones through it (see
        # dbqueue.schema.waiting_index_statement).
        indexes = [
            models.Index(
                fields=["state", "run_at"],
                name=index_name(opts.db_table, "waiting"),
                condition=~models.Q(state=int(State.FAILED)),
            )
        ]

    attrs: dict[str, Any] = {
        "__module__": ring_model.__module__,
        "__qualname__": f"{ring_model.__qualname__}Failed",
        "__doc__": f"The failed messages of the ring queue {opts.label}.",
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
        "__str__": lambda self: f"{self._meta.verbose_name} #{self.pk}",
    }
    # A payload field named like a failed column is refused by the spec (InvalidSpec).
    attrs.update({f.name: f.clone() for f in payload if f.name not in attrs})
    return bind_to_module(type(f"{ring_model.__name__}Failed", (models.Model,), attrs))


def ring_capacity(model: type[models.Model]) -> int | None:
    """The declared capacity, or None when the options are invalid (the system check reports
    them; the class itself must still be created)."""
    try:
        return options_of(model).capacity
    except InvalidSpec:
        return None


class RingQueueModelBase(ModelBase):
    """For each concrete ring model: the failed model, nullable payload columns in the slot
    table, and the ``RingSlots`` index, so ``makemigrations`` writes all of it."""

    def __new__(
        mcs, name: str, bases: tuple[type, ...], attrs: dict[str, Any], **kwargs: Any
    ) -> RingQueueModelBase:
        cls: Any = super().__new__(mcs, name, bases, attrs, **kwargs)
        opts = cls._meta
        if opts.abstract or opts.proxy or opts.swapped:
            return cls  # type: ignore[no-any-return]
        payload = payload_fields(cls)
        cls.failed_model = make_failed_model(cls, payload)
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
