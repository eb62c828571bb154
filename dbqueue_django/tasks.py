"""A Django Tasks backend (Django 6+) on dbqueue::

    TASKS = {"default": {"BACKEND": "dbqueue_django.tasks.DBQueueBackend"}}

``@task`` functions are enqueued into the :class:`~dbqueue_django.models.TaskItem` queue in
the caller's transaction (a task enqueued in a view that rolls back never runs), and
``manage.py runqueueworker`` runs them. Deferred tasks (``run_after``), priorities, async
tasks, ``takes_context`` and ``get_result`` are supported, and Django's task signals fire.
A task that raises is failed at once (Django Tasks are not retried automatically); it waits
in the admin under *dbqueue > Tasks*, where **Retry** runs it again.

Every task queue name of a backend shares the one dbqueue queue: ``QUEUES`` restricts the
names accepted, and a worker runs tasks of every name.

Results are kept until ``manage.py prunetasks`` deletes them, or, with the backend's
``OPTIONS = {"result_retention": "30d"}`` (a duration, see :mod:`dbqueue_django.durations`, or
a timedelta), the worker deletes those that finished longer ago, when it starts and then every
hour (:func:`result_retention_chores`).
"""

from __future__ import annotations

import sys
import traceback
from datetime import datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import connections, router, transaction
from django.tasks import TaskResultStatus, task_backends
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import Task, TaskContext, TaskError, TaskResult
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils import timezone
from django.utils.crypto import get_random_string
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from dbqueue.arguments import check_run_at
from dbqueue.errors import InvalidArgument, InvalidPayload, PayloadTooLarge
from dbqueue.message import State
from dbqueue.worker import Chore
from dbqueue_django.durations import duration_setting
from dbqueue_django.models import TaskItem, TaskRun
from dbqueue_django.task_results import FinishedTasks

if TYPE_CHECKING:  # generic in django-stubs only
    AnyTask = Task[..., Any]
    AnyResult = TaskResult[..., Any]

#: Identifies this process in ``TaskResult.worker_ids``.
WORKER_ID = get_random_string(32)
#: The backend option that sets how long finished results are kept.
RESULT_RETENTION = "result_retention"
#: Seconds between two prunes by the worker (it prunes once when it starts, too).
RETENTION_EVERY = 3600.0


class DBQueueBackend(BaseTaskBackend):
    """Tasks in the application's database, run by ``runqueueworker``.

    ``OPTIONS``: ``result_retention`` (optional), how long the results of finished tasks are
    kept: a duration (``"30d"``, ``"12h"``) or a timedelta. The worker deletes older ones.
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    @cached_property
    def result_retention(self) -> timedelta | None:
        """How long finished results are kept (None: until ``manage.py prunetasks``);
        ImproperlyConfigured if the option is not a duration."""
        value = self.options.get(RESULT_RETENTION)
        if value is None:
            return None
        setting = f"TASKS[{self.alias!r}]['OPTIONS'][{RESULT_RETENTION!r}]"
        return duration_setting(value, setting=setting)

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        """Django's checks of the backend, and its ``result_retention`` option."""
        errors = list(super().check(**kwargs))
        try:
            self.result_retention  # noqa: B018 - read to validate
        except ImproperlyConfigured as exc:
            errors.append(
                checks.Error(
                    str(exc),
                    hint='Write a duration such as "30d" or "12h", or a datetime.timedelta.',
                    id="dbqueue.E003",
                )
            )
        return errors

    def validate_task(self, task: AnyTask) -> None:
        """Django's checks of a task, and its ``run_after`` against the latest time a queue
        item may be due (:data:`dbqueue.arguments.MAX_RUN_AT`): refused when the task is made
        (``.using(run_after=...)``), as Django refuses a naive one, not at enqueue."""
        super().validate_task(task)
        # A naive run_after (USE_TZ = False) is left to the push, which refuses it.
        if task.run_after is not None and timezone.is_aware(task.run_after):
            try:
                check_run_at("run_after", task.run_after)
            except InvalidArgument as exc:
                raise InvalidTask(f"{task.module_path}: {exc}") from exc

    def enqueue[**P, R](
        self, task: Task[P, R], args: list[Any], kwargs: dict[str, Any]
    ) -> TaskResult[P, R]:
        """Push the task in the current transaction; return its READY result."""
        self.validate_task(task)
        args = list(normalize_json(list(args)))  # type: ignore[arg-type]
        kwargs = dict(normalize_json(dict(kwargs)))  # type: ignore[arg-type]
        queue = TaskItem.queue.using(router.db_for_write(TaskItem))
        try:
            item_id = queue.push(
                priority=task.priority,
                run_at=task.run_after,
                task_path=task.module_path,
                backend=self.alias,
                queue_name=task.queue_name,
                args=args,
                kwargs=kwargs,
                takes_context=task.takes_context,
                run_after=task.run_after,
            )
        except (InvalidPayload, PayloadTooLarge) as exc:
            raise InvalidTask(f"{task.module_path}: {exc}") from exc
        # The database's own time (the push's statement time), as get_result() reads it: a
        # clock read here would differ from it, and refresh() would change the result.
        enqueued_at = (
            TaskItem.objects.using(queue.alias)
            .values_list("enqueued_at", flat=True)
            .get(pk=item_id)
        )
        result: TaskResult[P, R] = TaskResult(
            task=task,
            id=str(item_id),
            status=TaskResultStatus.READY,
            enqueued_at=enqueued_at,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        # Like Django's database backends: the signal fires once the task can be seen.
        transaction.on_commit(
            lambda: task_enqueued.send(type(self), task_result=result), using=queue.alias
        )
        return result

    def get_result(self, result_id: str) -> AnyResult:
        """The task's state: in the queue (ready, running, failed) or finished."""
        try:
            item_id = int(result_id)
        except (TypeError, ValueError):
            raise TaskResultDoesNotExist(result_id) from None
        item = TaskItem.queue.items().filter(pk=item_id).first()
        run = TaskRun.objects.filter(pk=item_id).first()
        if item is None and run is None:
            raise TaskResultDoesNotExist(result_id)
        return _result(item, run)


# -- the worker's side ----------------------------------------------------------------------------


def result_retention_chores(database: str | None = None) -> list[Chore]:
    """The worker's chores that apply each backend's ``result_retention`` to the task tables
    in ``database`` (default: the router's choice for them)."""
    using = database or router.db_for_write(TaskRun)
    chores = []
    for alias in _dbqueue_backends():
        retention = task_backends[alias].result_retention  # type: ignore[attr-defined]
        if retention is not None:
            tasks = _RetainedTasks(alias, retention, using)
            chores.append(Chore(tasks.name, RETENTION_EVERY, tasks.prune, tasks.disconnect))
    return chores


def _dbqueue_backends() -> list[str]:
    """The aliases of the TASKS backends that are this one (or a subclass). The others are
    not loaded: one that cannot be is Django's checks' to report, not the worker's."""
    aliases = []
    for alias, params in task_backends.settings.items():
        try:
            backend = import_string(params["BACKEND"])
        except ImportError:
            continue
        if isinstance(backend, type) and issubclass(backend, DBQueueBackend):
            aliases.append(alias)
    return aliases


class _RetainedTasks:
    """The results of one backend's tasks, pruned to its retention."""

    def __init__(self, backend: str, retention: timedelta, using: str) -> None:
        self.backend, self.retention, self.using = backend, retention, using
        self.name = f"task result retention ({backend!r}: {retention})"

    def prune(self) -> str | None:
        tasks = FinishedTasks.older_than(self.retention, using=self.using, backend=self.backend)
        pruned = tasks.delete()
        return f"deleted {pruned}" if pruned.results or pruned.failed_tasks else None

    def disconnect(self) -> None:
        connections[self.using].close()


def run_task(item: TaskItem) -> None:
    """The handler ``runqueueworker`` runs for each TaskItem: the task, its signals, its run
    record. An exception fails the item (the worker stores the traceback) and is re-raised."""
    task = _task(item.task_path, item)
    now = timezone.now()
    run, _ = TaskRun.objects.get_or_create(
        pk=item.pk,
        defaults={
            "task_path": item.task_path,
            "backend": item.backend,
            "queue_name": item.queue_name,
            "priority": getattr(item, "priority", 0),
            "args": item.args,
            "kwargs": item.kwargs,
            "run_after": item.run_after,
            "status": TaskResultStatus.RUNNING,
            "enqueued_at": item.enqueued_at,
            "started_at": now,
        },
    )
    run.status = TaskResultStatus.RUNNING
    run.last_attempted_at = now
    run.finished_at = None
    run.worker_ids = [*run.worker_ids, WORKER_ID]
    run.save()
    result = _from_run(task, run)
    sender = type(task.get_backend())
    task_started.send(sender, task_result=result)
    try:
        if item.takes_context:
            value = task.call(TaskContext(task_result=result), *item.args, **item.kwargs)
        else:
            value = task.call(*item.args, **item.kwargs)
        value = normalize_json(value)
    except BaseException as exc:
        # KeyboardInterrupt too: raised by the task's own code in a worker thread (the worker
        # handles Ctrl-C in its main thread), it is the task failing, recorded like any other.
        error = {
            "exception_class_path": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "traceback": "".join(traceback.format_exception(exc)),
        }
        _finish(run, TaskResultStatus.FAILED, errors=[*run.errors, error])
        task_finished.send(sender, task_result=_from_run(task, run))
        raise
    _finish(run, TaskResultStatus.SUCCESSFUL, return_value=value)
    task_finished.send(sender, task_result=_from_run(task, run))


def _finish(run: TaskRun, status: str, **values: Any) -> None:
    run.status = status
    run.finished_at = timezone.now()
    for name, value in values.items():
        setattr(run, name, value)
    run.save()


def _importable(path: str) -> bool:
    """Whether the module of ``path`` may be imported to find a task: one already imported
    (nothing runs), or one of an installed app, of the project's own package (its settings
    module's), or under a prefix of the ``DBQUEUE_TASK_MODULES`` setting. A stored path is
    data: importing any module it names would run that module's import-time code."""
    module = path.rpartition(".")[0]
    if module in sys.modules:
        return True
    prefixes = [c.name for c in apps.get_app_configs()]
    prefixes += list(getattr(settings, "DBQUEUE_TASK_MODULES", ()))
    if settings.SETTINGS_MODULE:
        prefixes.append(settings.SETTINGS_MODULE.partition(".")[0])
    return any(module == p or module.startswith(f"{p}.") for p in prefixes)


def _task(path: str, item: TaskItem | TaskRun) -> AnyTask:
    if not _importable(path):
        raise InvalidTask(
            f"task {path!r} is not in an installed app, the project's package or "
            f"DBQUEUE_TASK_MODULES: its module was not imported"
        )
    try:
        task = import_string(path)
    except ImportError as exc:
        raise InvalidTask(f"task {path!r} cannot be imported: {exc}") from exc
    if not isinstance(task, Task):
        raise InvalidTask(f"{path!r} is not a task (decorate it with @task)")
    return task.using(
        priority=getattr(item, "priority", None),
        queue_name=item.queue_name,
        run_after=item.run_after,
        backend=item.backend,
    )


def _errors(raw: list[dict[str, str]]) -> list[TaskError]:
    return [TaskError(**e) for e in raw]


def _from_run(task: AnyTask, run: TaskRun) -> AnyResult:
    result: AnyResult = TaskResult(
        task=task,
        id=str(run.pk),
        status=TaskResultStatus(run.status),
        enqueued_at=run.enqueued_at,
        started_at=run.started_at,
        finished_at=run.finished_at,
        last_attempted_at=run.last_attempted_at,
        args=run.args,
        kwargs=run.kwargs,
        backend=run.backend,
        errors=_errors(run.errors),
        worker_ids=list(run.worker_ids),
    )
    object.__setattr__(result, "_return_value", run.return_value)
    return result


def _result(item: Any, run: TaskRun | None) -> AnyResult:
    """The result of a task from its queue item (if still queued) and its run record."""
    if item is None:
        assert run is not None
        return _from_run(_task(run.task_path, run), run)
    task = _task(item.task_path, item)
    status = {
        State.READY: TaskResultStatus.READY,
        State.LEASED: TaskResultStatus.RUNNING,
        State.FAILED: TaskResultStatus.FAILED,
    }.get(State(item.state), TaskResultStatus.READY)
    errors = _errors(run.errors) if run is not None else []
    if status == TaskResultStatus.FAILED and not errors and item.last_error:
        # Failed without running: a lease that expired (the worker died), for one.
        errors = [TaskError(exception_class_path="builtins.RuntimeError",
                            traceback=item.last_error)]  # fmt: skip
    started: datetime | None = run.started_at if run is not None else None
    result: AnyResult = TaskResult(
        task=task,
        id=str(item.pk),
        status=status,
        enqueued_at=item.enqueued_at,
        started_at=started,
        finished_at=run.finished_at
        if run is not None and status != TaskResultStatus.READY
        else None,
        last_attempted_at=run.last_attempted_at if run is not None else None,
        args=item.args,
        kwargs=item.kwargs,
        backend=item.backend,
        errors=errors,
        worker_ids=list(run.worker_ids) if run is not None else [],
    )
    return result
