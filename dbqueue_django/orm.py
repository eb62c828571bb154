"""What the ORM does on a queue model: every way of creating a row is a push, every way of
deleting one removes the whole message.

A queue model is a model, so its users reach for ``objects.create()``, ``save()``,
``bulk_create()`` and ``delete()``. Written as plain rows, those would make messages no worker
sees (a split queue's data row without its meta row) or break the queue (a ring's slot row).
So, on both kinds of queue:

* ``Model(...).save()``, ``objects.create()`` and ``bulk_create()`` push, in the current
  transaction, with the same validation as ``Model.queue.push`` / ``push_many`` (no
  ``pre_save``/``post_save`` signals: a push is not a model save). A new instance with an id
  of its own is refused: a message's id is its push's. In a unique queue, an instance whose
  key an item holds comes back as that item (its id and stored values), since nothing was
  written; ``Model.queue.push`` says which pushes were duplicates.
* ``instance.delete()`` and ``queryset.delete()`` delete whole messages. On a split queue the
  meta row goes with its data row through the relation's ``on_delete=CASCADE`` (so cascades
  from other models do the same); on a ring they go through ``Model.queue.delete``.
* ``save()`` of a split queue's existing item updates its payload (its delivery state lives in
  the meta table, which the ORM does not write): allowed, documented. A ring's slots are
  rewritten by the queue only: ``save()`` of an existing slot and ``queryset.update()`` are
  refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import models, router

from dbqueue.errors import InvalidArgument
from dbqueue.ring import SlotState
from dbqueue_django.spec import payload_fields


def payload_of(obj: models.Model) -> dict[str, Any]:
    """The payload an unsaved instance of a queue model carries, by attname."""
    return {str(f.attname): getattr(obj, str(f.attname)) for f in payload_fields(type(obj))}


def refuse_own_id(model: type[models.Model], pk: Any) -> None:
    if pk is not None:
        raise InvalidArgument(
            f"{model.__name__}: a new queue item cannot choose its id ({pk!r}); its id is its "
            f"push's. Create it without one, or push it with {model.__name__}.queue.push(...)"
        )


def push_instance(obj: models.Model, using: str | None) -> None:
    """Push a new instance of a queue model (its ``save()``)."""
    model: Any = type(obj)
    refuse_own_id(model, obj.pk)
    alias = using or router.db_for_write(model, instance=obj)
    mark_pushed([obj], [model.queue.using(alias).push(**payload_of(obj))], alias)


def mark_pushed(objs: list[Any], numbers: list[int], alias: str) -> None:
    """Make pushed instances look saved: their ids (a ring's: the number, in its slot), their
    database. An instance whose push found its unique key held (a duplicate: nothing was
    written) becomes the item that holds it: its id and its stored values."""
    for obj, number in zip(objs, numbers, strict=True):
        if getattr(type(obj), "queue_layout", "split") == "ring":
            obj.seq, obj.state = number, int(SlotState.READY)
            obj.slot = number % type(obj).queue.spec.options.capacity
        else:
            obj.pk = int(number)  # a Pushed is an int: the instance keeps a plain one
        obj._state.adding = False
        obj._state.db = alias
    duplicates = [o for o, n in zip(objs, numbers, strict=True) if getattr(n, "duplicate", False)]
    if duplicates:
        load_holders(duplicates, alias)


def load_holders(objs: list[Any], alias: str) -> None:
    """Give each instance the stored values of the item it is (its holder's), in one query.
    One that is gone already (finished and deleted by a worker since the push) keeps the
    values it was pushed with."""
    model = type(objs[0])
    holders = model._base_manager.using(alias).in_bulk({obj.pk for obj in objs})
    fields = [str(f.attname) for f in model._meta.concrete_fields]
    for obj in objs:
        holder = holders.get(obj.pk)
        if holder is not None:
            for name in fields:
                setattr(obj, name, getattr(holder, name))


class QueueQuerySet[M: models.Model](models.QuerySet[M]):
    """The default manager's queryset of a queue model: ``bulk_create`` pushes."""

    def bulk_create(
        self,
        objs: Iterable[M],
        batch_size: int | None = None,
        ignore_conflicts: bool = False,
        update_conflicts: bool = False,
        *args: Any,
        **kwargs: Any,
    ) -> list[M]:
        """Push the instances (``Model.queue.push_many``: all validated first, nothing written
        if any is invalid) and set their ids. In a unique queue an instance whose key an item
        holds (or an earlier instance took) becomes that item (see :func:`mark_pushed`)."""
        model: Any = self.model
        if ignore_conflicts or update_conflicts:
            raise InvalidArgument(
                f"{model.__name__}.objects.bulk_create(): a push has no conflicts to ignore or "
                "update; call it without ignore_conflicts and update_conflicts"
            )
        objs = list(objs)
        for obj in objs:
            refuse_own_id(model, obj.pk)
        alias = self.db
        ids = model.queue.using(alias).push_many(
            [payload_of(obj) for obj in objs], batch_size=batch_size
        )
        mark_pushed(objs, list(ids), alias)
        return objs


class RingQuerySet[M: models.Model](QueueQuerySet[M]):
    """A ring's slots: deleting deletes the messages they hold; updating is the queue's."""

    def delete(self) -> tuple[int, dict[str, int]]:
        """Delete the messages these slots hold (``Model.queue.delete``); the slots stay."""
        model: Any = self.model
        ids = list(self.exclude(state=int(SlotState.EMPTY)).values_list("seq", flat=True))
        deleted = model.queue.using(self.db).delete(ids) if ids else 0
        return deleted, {model._meta.label: deleted}

    delete.alters_data = True  # type: ignore[attr-defined]
    delete.queryset_only = True  # type: ignore[attr-defined]

    def update(self, **kwargs: Any) -> int:
        model: Any = self.model
        raise InvalidArgument(
            f"{model.__name__}: a ring's slots are written by its queue only; push a new "
            f"message with {model.__name__}.queue.push(...), or delete this one"
        )

    update.alters_data = True  # type: ignore[attr-defined]


QueueManager = models.Manager.from_queryset(QueueQuerySet)
RingManager = models.Manager.from_queryset(RingQuerySet)
