"""Queue models: one declaration gives a queue's tables and ``Model.queue``.

``QueueModel`` is a split queue (a data table, a meta table and the meta table's head table);
``RingQueueModel`` a ring queue (a table of ``capacity`` preallocated slots and a failed
table). Both generate their companion models, so ``makemigrations`` writes every table into
the project's own migrations.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar, TypeGuard

from django.apps import AppConfig, apps
from django.db import models, router
from django.db.models.base import ModelBase
from django.db.models.functions import Now
from django.utils import timezone

from dbqueue.errors import InvalidArgument
from dbqueue.message import State
from dbqueue.spec import GROUP_HEAD_INFIX, GROUP_META_INFIX, index_name
from dbqueue.unique import UNIQUE_KEY_COLUMN, UniqueScope
from dbqueue_django.generated import bind_to_module
from dbqueue_django.orm import QueueManager, RingManager, push_instance
from dbqueue_django.queue import DjangoQueue, QueueDescriptor
from dbqueue_django.ring_model import RING_BASE_FIELDS, SLOT_STATES, RingQueueModelBase
from dbqueue_django.ring_queue import RingDjangoQueue
from dbqueue_django.schedule_rows import QueueSchedule  # noqa: F401 - registered with this app
from dbqueue_django.spec import BASE_FIELDS, groups_of, meta_relation, unique_scope_of
from dbqueue_django.worker_rows import QueueWorker  # noqa: F401 - registered with this app

STATE_CHOICES = [(s.value, s.name.lower()) for s in State]


def unique_constraint(table: str, scope: UniqueScope) -> models.UniqueConstraint:
    """The partial unique index on a unique queue's keys, over its scope's states: the core's
    (``dbqueue.schema.unique_index_statement``), so that ``makemigrations`` writes it."""
    # Positional, in the core predicate's order: Q(**kwargs) would sort the conditions.
    held: list[Any] = [("unique_key__isnull", False)]
    if scope is not UniqueScope.STORED:
        held.append(("state__in", [int(s) for s in scope.states]))
    return models.UniqueConstraint(
        fields=[UNIQUE_KEY_COLUMN], condition=models.Q(*held), name=index_name(table, "unique")
    )


def make_meta_model(data_model: type[models.Model], group: str | None = None) -> type[models.Model]:
    """Create and register ``<Model>QueueMeta``, the narrow table the dequeue reads (for
    consumer group ``group`` of a queue with groups: ``<Model>QueueMeta_<group>``, table
    ``<table>_meta_<group>``, reached as ``queue_meta_<group>``; it also keeps the group's own
    ``last_error``, as the core's ``dbqueue.schema.group_statements``).

    Its primary key is a one-to-one to the data row *without* a database constraint: the
    core's statements keep both tables consistent, and a foreign key check on every batch
    dequeue has caused deadlocks in other queues. The relation still gives the ORM (admin,
    querysets) the join, ``Model.objects.filter(queue_meta__state=...)``, and its
    ``on_delete=CASCADE`` makes every ORM delete of items (instance, queryset, a cascade from
    another model) delete their meta rows too (see dbqueue_django.orm).

    A unique queue's (``QueueOptions.unique``, ``unique_scope``, ``unique_period``) also has
    the ``unique_key`` column and its partial unique index (:func:`unique_constraint`).
    """
    opts = data_model._meta
    table = opts.db_table
    scope = unique_scope_of(data_model)
    meta_table = f"{table}_meta" if group is None else f"{table}{GROUP_META_INFIX}{group}"
    named = table if group is None else meta_table  # what the core names its indexes after
    suffix = "" if group is None else f"_{group}"

    class Meta:
        apps = opts.apps  # the data model's registry (isolated test apps, historical models)
        app_label = opts.app_label
        db_table = meta_table
        verbose_name = f"{opts.verbose_name} queue state" + ("" if group is None else f" ({group})")
        indexes = [
            models.Index(
                fields=["-priority", "run_at", "item"],
                name=index_name(named, "ready"),
                condition=models.Q(state=int(State.READY)),
            ),
            models.Index(
                fields=["lease_until"],
                name=index_name(named, "leased"),
                condition=models.Q(state=int(State.LEASED)),
            ),
        ]
        if scope is not None:
            constraints = [unique_constraint(table, scope)]

    attrs = {
        "__module__": data_model.__module__,
        "__qualname__": f"{data_model.__qualname__}QueueMeta{suffix}",
        "Meta": Meta,
        "item": models.OneToOneField(
            data_model,
            primary_key=True,
            db_column="id",
            db_constraint=False,
            on_delete=models.CASCADE,
            related_name=meta_relation(group),
        ),
        "state": models.SmallIntegerField(choices=STATE_CHOICES, default=0, db_default=0),
        "priority": models.SmallIntegerField(default=0, db_default=0),
        "run_at": models.DateTimeField(default=timezone.now, db_default=Now()),
        "attempts": models.SmallIntegerField(default=0, db_default=0),
        "lease_until": models.DateTimeField(null=True, blank=True),
        "__str__": lambda self: f"{self.item_id} ({State(self.state).name.lower()})",
    }
    if scope is not None:
        attrs[UNIQUE_KEY_COLUMN] = models.TextField(null=True, blank=True, editable=False)
    if group is not None:
        attrs["last_error"] = models.TextField(null=True, blank=True, editable=False)
    name = f"{data_model.__name__}QueueMeta{suffix}"
    return bind_to_module(type(name, (models.Model,), attrs))


def make_head_model(data_model: type[models.Model], group: str | None = None) -> type[models.Model]:
    """Create and register ``<Model>QueueHead``, the head table of the meta table (for
    consumer group ``group``: ``<Model>QueueHead_<group>``, table ``<table>_head_<group>``),
    as the core's ``dbqueue.schema.head_statement`` creates it: a row per priority, with where
    its ready items begin in the meta table's ready index (``dbqueue.upkeep.heads``). Only the
    core's statements read and write it; it is a model so that ``makemigrations`` writes it
    into the user's own migrations beside the meta table."""
    opts = data_model._meta
    table = opts.db_table
    head_table = f"{table}_head" if group is None else f"{table}{GROUP_HEAD_INFIX}{group}"
    suffix = "" if group is None else f"_{group}"

    class Meta:
        apps = opts.apps  # the data model's registry, as the meta model's
        app_label = opts.app_label
        db_table = head_table
        verbose_name = f"{opts.verbose_name} queue head" + ("" if group is None else f" ({group})")

    attrs = {
        "__module__": data_model.__module__,
        "__qualname__": f"{data_model.__qualname__}QueueHead{suffix}",
        "Meta": Meta,
        "priority": models.SmallIntegerField(primary_key=True),
        "run_at": models.DateTimeField(),
        "__str__": lambda self: f"priority {self.priority} from {self.run_at}",
    }
    name = f"{data_model.__name__}QueueHead{suffix}"
    return bind_to_module(type(name, (models.Model,), attrs))


class QueueModelBase(ModelBase):
    """Creates the meta model and its head model right after each concrete queue model, in the
    same app, so ``makemigrations`` writes every table into the user's own migrations; for a
    queue with consumer groups, one meta model and one head model per group instead
    (``queue_group_models``, ``queue_group_head_models``)."""

    def __new__(
        mcs, name: str, bases: tuple[type, ...], attrs: dict[str, Any], **kwargs: Any
    ) -> QueueModelBase:
        cls: Any = super().__new__(mcs, name, bases, attrs, **kwargs)
        opts = cls._meta
        if not opts.abstract and not opts.proxy and not opts.swapped:
            groups = groups_of(cls)
            cls.queue_group_models = {g: make_meta_model(cls, g) for g in groups}
            cls.queue_group_head_models = {g: make_head_model(cls, g) for g in groups}
            if not groups:
                cls.queue_meta_model = make_meta_model(cls)
                cls.queue_head_model = make_head_model(cls)
        return cls  # type: ignore[no-any-return]


class BaseQueueModel(models.Model):
    """What every queue model is: a split queue (:class:`QueueModel`) or a ring queue
    (:class:`RingQueueModel`). Subclass one of those two."""

    #: The core layout of the queue ("split" or "ring").
    queue_layout: ClassVar[str]
    #: The columns the layout's table has anyway: every other concrete field is payload.
    queue_base_fields: ClassVar[frozenset[str]]
    queue: ClassVar[DjangoQueue[Any]]

    class Meta:
        abstract = True


class QueueModel(BaseQueueModel, metaclass=QueueModelBase):
    """Subclass this to declare a queue: the fields are the payload.

    ``class QueueOptions`` inside the model sets ``max_attempts``, ``lease``, ``backoff``,
    ``max_payload_bytes``, ``push_many_batch``, ``rescue_batch``, ``keep_done``, ``unique``,
    ``unique_scope``, ``unique_period``, ``groups`` (all optional; ``keep_done = True`` keeps
    processed items as done instead of deleting them; ``unique = ("order",)`` makes a push of
    an order already queued return the item that holds it, see :mod:`dbqueue.unique`: fields
    by name, a ForeignKey's too; ``groups = ("email", "search")`` delivers each item to each
    consumer group, ``Model.queue.group("email")``, with a meta model per group).
    """

    id = models.BigAutoField(primary_key=True)
    enqueued_at = models.DateTimeField(default=timezone.now, db_default=Now(), editable=False)
    last_error = models.TextField(null=True, blank=True, editable=False)  # noqa: DJ001

    queue_layout = "split"
    queue_base_fields = BASE_FIELDS
    queue: ClassVar[DjangoQueue[Any]] = QueueDescriptor()  # type: ignore[assignment]
    #: The meta model (none for a queue with consumer groups: see queue_group_models).
    queue_meta_model: ClassVar[type[models.Model]]
    #: A queue with consumer groups: each group's meta model, by group (else empty).
    queue_group_models: ClassVar[dict[str, type[models.Model]]]
    #: The head model of the meta model (``<Model>QueueHead``, table ``<table>_head``: see
    #: :func:`make_head_model`); none for a queue with consumer groups.
    queue_head_model: ClassVar[type[models.Model]]
    #: A queue with consumer groups: each group's head model, by group (else empty).
    queue_group_head_models: ClassVar[dict[str, type[models.Model]]]

    objects = QueueManager()

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self._meta.verbose_name} #{self.pk}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """A new item is pushed (``Model.queue.push``, in the current transaction); an
        existing one has its payload updated (its delivery state is the queue's)."""
        if self._state.adding:
            push_instance(self, kwargs.get("using"))
        else:
            super().save(*args, **kwargs)

    @property
    def cancel_requested(self) -> bool:
        """Whether this item was asked to stop (``Model.queue.cancel()`` while it was leased):
        what a long handler checks now and then. One query, on the item's database."""
        alias = self._state.db or router.db_for_read(type(self), instance=self)
        return type(self).queue.using(alias).cancel_requested(self)


class RingQueueModel(BaseQueueModel, metaclass=RingQueueModelBase):
    """Subclass this to declare a ring queue: the fields are the payload, and
    ``class QueueOptions`` must set ``capacity``, the number of slots.

    A ring is a table of ``capacity`` preallocated slots that is only ever updated: FIFO,
    bounded (a push into a full ring spills into ``<Model>Failed``, or raises QueueFull, or
    waits: ``when_full``) and free of bloat. Messages that used their last attempt move to
    ``<Model>Failed``. Besides the split queue's options (but ``keep_done``: slots are
    reused, and ``unique``, ``unique_scope``, ``unique_period``: a slot is rewritten in place,
    which a unique index would slow), ``QueueOptions`` takes ``when_full``, ``push_timeout``,
    ``hole_timeout`` and ``stranded_after``; a ring has no priorities and no delays.
    ``groups = ("email", "search")`` delivers each message to each consumer group,
    ``Model.queue.group("email")``, with a state model and a side model per group.

    Rows of this model are slots: ``id`` is the number of the message a slot holds (or last
    held), ``state`` says whether it is empty, ready, leased or waiting to be retried.
    """

    slot = models.IntegerField(primary_key=True, editable=False)
    seq = models.BigIntegerField(editable=False)
    state = models.SmallIntegerField(choices=SLOT_STATES, default=0, db_default=0, editable=False)
    attempts = models.SmallIntegerField(default=0, db_default=0, editable=False)
    pushed_at = models.DateTimeField(null=True, blank=True, editable=False)
    lease_until = models.DateTimeField(null=True, blank=True, editable=False)
    last_error = models.TextField(null=True, blank=True, editable=False)  # noqa: DJ001

    queue_layout = "ring"
    queue_base_fields = RING_BASE_FIELDS
    queue: ClassVar[RingDjangoQueue[Any]] = QueueDescriptor(RingDjangoQueue)  # type: ignore[assignment]
    failed_model: ClassVar[type[models.Model]]
    #: A ring with consumer groups: each group's state model (``<Model>Ring_<group>``, its
    #: row of every slot) and side model (``<Model>Side_<group>``), by group (else empty).
    queue_group_models: ClassVar[dict[str, type[models.Model]]]
    queue_group_failed_models: ClassVar[dict[str, type[models.Model]]]

    objects = RingManager()

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self._meta.verbose_name} #{self.seq}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """A new message is pushed (``Model.queue.push``, in the current transaction); a
        slot already written is the queue's to rewrite, and is refused."""
        if self._state.adding:
            push_instance(self, kwargs.get("using"))
            return
        raise InvalidArgument(
            f"{type(self).__name__}: a ring's slots are written by its queue only; push a new "
            f"message with {type(self).__name__}.queue.push(...)"
        )

    def delete(
        self, using: str | None = None, keep_parents: bool = False
    ) -> tuple[int, dict[str, int]]:
        """Delete the message this slot holds (``Model.queue.delete``); the slot stays."""
        queue = type(self).queue.using(using or router.db_for_write(type(self), instance=self))
        deleted = queue.delete([self.seq])
        return deleted, {self._meta.label: deleted}

    @property
    def id(self) -> int:
        """The number of the message this slot holds (or last held)."""
        return int(self.seq)


def is_queue_model(model: object) -> TypeGuard[type[BaseQueueModel]]:
    """True for a concrete queue model of either kind."""
    return (
        isinstance(model, type) and issubclass(model, BaseQueueModel) and not model._meta.abstract
    )


def queue_models(app_configs: Iterable[AppConfig] | None = None) -> list[type[BaseQueueModel]]:
    """Every concrete queue model installed, split and ring (in ``app_configs`` if given)."""
    configs = list(app_configs) if app_configs is not None else list(apps.get_app_configs())
    return [m for config in configs for m in config.get_models() if is_queue_model(m)]


def ring_models(app_configs: Iterable[AppConfig] | None = None) -> list[type[RingQueueModel]]:
    """Every concrete ring queue model installed (in ``app_configs`` if given)."""
    return [m for m in queue_models(app_configs) if issubclass(m, RingQueueModel)]


class QueueOverview(models.Model):
    """No table: the admin's "Queue overview" page hangs on this unmanaged model."""

    class Meta:
        managed = False
        default_permissions = ()
        verbose_name = "queue overview"
        verbose_name_plural = "queue overview"

    def __str__(self) -> str:
        return "queue overview"


class TaskItem(QueueModel):
    """A Django Task enqueued through :class:`dbqueue_django.tasks.DBQueueBackend`: the queue
    ``runqueueworker`` runs them from. Failed tasks wait here for a retry from the admin."""

    task_path = models.CharField(max_length=255)
    backend = models.CharField(max_length=100)
    queue_name = models.CharField(max_length=100)
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)
    takes_context = models.BooleanField(default=False)
    #: The task's own ``run_after`` (None if it had none); the queue's ``run_at`` changes on a
    #: retry, and a result must give back the task as it was enqueued.
    run_after = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "task"

    class QueueOptions:
        max_attempts = 1  # Django Tasks run once; retry failed ones from the admin

    def __str__(self) -> str:
        return f"{self.task_path} #{self.pk}"


class TaskRun(models.Model):
    """A task's result: what the worker recorded about it (start, end, outcome, return value).
    A task's queue item is deleted once it succeeds, so its result lives here (keyed by the
    item id). ``manage.py prunetasks`` and the backend's ``result_retention`` delete old ones."""

    id = models.BigIntegerField(primary_key=True)
    task_path = models.CharField(max_length=255)
    backend = models.CharField(max_length=100)
    queue_name = models.CharField(max_length=100)
    priority = models.SmallIntegerField(default=0)
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)
    run_after = models.DateTimeField(null=True)
    status = models.CharField(max_length=10)
    enqueued_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField(null=True)
    last_attempted_at = models.DateTimeField(null=True)
    return_value = models.JSONField(null=True)
    errors = models.JSONField(default=list)
    worker_ids = models.JSONField(default=list)

    class Meta:
        verbose_name = "task result"
        # Pruning finds finished results by age.
        indexes = [models.Index(fields=["finished_at"], name="dbqueue_taskrun_finished")]

    def __str__(self) -> str:
        return f"{self.task_path} #{self.pk} ({self.status})"
