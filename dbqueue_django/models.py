"""``QueueModel``: one model declaration gives a queue's data table and its meta table."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar

from django.apps import AppConfig, apps
from django.db import models
from django.db.models.base import ModelBase
from django.db.models.functions import Now
from django.utils import timezone

from dbqueue.message import State
from dbqueue.spec import index_name
from dbqueue_django.queue import QueueDescriptor

if TYPE_CHECKING:
    from dbqueue_django.queue import DjangoQueue

STATE_CHOICES = [(s.value, s.name.lower()) for s in State]


def make_meta_model(data_model: type[models.Model]) -> type[models.Model]:
    """Create and register ``<Model>QueueMeta``, the narrow table the dequeue reads.

    Its primary key is a one-to-one to the data row *without* a database constraint: the
    core's statements keep both tables consistent, and a foreign key check on every batch
    dequeue has caused deadlocks in other queues. The relation still gives the ORM (admin,
    querysets) the join: ``Model.objects.filter(queue_meta__state=...)``.
    """
    opts = data_model._meta
    table = opts.db_table

    class Meta:
        apps = opts.apps  # the data model's registry (isolated test apps, historical models)
        app_label = opts.app_label
        db_table = f"{table}_meta"
        verbose_name = f"{opts.verbose_name} queue state"
        indexes = [
            models.Index(
                fields=["-priority", "run_at", "item"],
                name=index_name(table, "ready"),
                condition=models.Q(state=int(State.READY)),
            ),
            models.Index(
                fields=["lease_until"],
                name=index_name(table, "leased"),
                condition=models.Q(state=int(State.LEASED)),
            ),
        ]

    attrs = {
        "__module__": data_model.__module__,
        "__qualname__": f"{data_model.__qualname__}QueueMeta",
        "Meta": Meta,
        "item": models.OneToOneField(
            data_model,
            primary_key=True,
            db_column="id",
            db_constraint=False,
            on_delete=models.DO_NOTHING,
            related_name="queue_meta",
        ),
        "state": models.SmallIntegerField(choices=STATE_CHOICES, default=0, db_default=0),
        "priority": models.SmallIntegerField(default=0, db_default=0),
        "run_at": models.DateTimeField(default=timezone.now, db_default=Now()),
        "attempts": models.SmallIntegerField(default=0, db_default=0),
        "lease_until": models.DateTimeField(null=True, blank=True),
        "__str__": lambda self: f"{self.item_id} ({State(self.state).name.lower()})",
    }
    return type(f"{data_model.__name__}QueueMeta", (models.Model,), attrs)


class QueueModelBase(ModelBase):
    """Creates the meta model right after each concrete queue model, in the same app, so
    ``makemigrations`` writes both tables into the user's own migrations."""

    def __new__(
        mcs, name: str, bases: tuple[type, ...], attrs: dict[str, Any], **kwargs: Any
    ) -> QueueModelBase:
        cls: Any = super().__new__(mcs, name, bases, attrs, **kwargs)
        opts = cls._meta
        if not opts.abstract and not opts.proxy and not opts.swapped:
            cls.queue_meta_model = make_meta_model(cls)
        return cls  # type: ignore[no-any-return]


class QueueModel(models.Model, metaclass=QueueModelBase):
    """Subclass this to declare a queue: the fields are the payload.

    ``class QueueOptions`` inside the model sets ``max_attempts``, ``lease``, ``backoff``,
    ``max_payload_bytes``, ``push_many_batch``, ``rescue_batch`` (all optional).
    """

    id = models.BigAutoField(primary_key=True)
    enqueued_at = models.DateTimeField(default=timezone.now, db_default=Now(), editable=False)
    last_error = models.TextField(null=True, blank=True, editable=False)  # noqa: DJ001

    queue: ClassVar[DjangoQueue[Any]] = QueueDescriptor()  # type: ignore[assignment]
    queue_meta_model: ClassVar[type[models.Model]]

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self._meta.verbose_name} #{self.pk}"


def queue_models(app_configs: Iterable[AppConfig] | None = None) -> list[type[QueueModel]]:
    """Every concrete queue model installed (in ``app_configs`` if given)."""
    configs = list(app_configs) if app_configs is not None else list(apps.get_app_configs())
    return [
        m
        for config in configs
        for m in config.get_models()
        if issubclass(m, QueueModel) and not m._meta.abstract
    ]


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

    class Meta:
        verbose_name = "task"

    class QueueOptions:
        max_attempts = 1  # Django Tasks run once; retry failed ones from the admin

    def __str__(self) -> str:
        return f"{self.task_path} #{self.pk}"


class TaskRun(models.Model):
    """What the worker recorded about a task: start, end, outcome, return value. A task's
    queue item is deleted once it succeeds, so its result lives here (keyed by the item id)."""

    id = models.BigIntegerField(primary_key=True)
    task_path = models.CharField(max_length=255)
    backend = models.CharField(max_length=100)
    queue_name = models.CharField(max_length=100)
    priority = models.SmallIntegerField(default=0)
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)
    status = models.CharField(max_length=10)
    enqueued_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField(null=True)
    last_attempted_at = models.DateTimeField(null=True)
    return_value = models.JSONField(null=True)
    errors = models.JSONField(default=list)
    worker_ids = models.JSONField(default=list)

    class Meta:
        verbose_name = "task run"

    def __str__(self) -> str:
        return f"{self.task_path} #{self.pk} ({self.status})"
