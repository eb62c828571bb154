"""Django 6's Tasks framework with the django-tasks-db backend, driven through its documented API: a
module-level ``@task`` function (``bench.djangoapp.tasks.noop``) taking the 300-character
string, ``.enqueue()`` once per message (the framework has no batch API), and django-tasks-db's
own ``db_worker`` command run in the worker process, which takes one task per loop.

It shares the Django site (``bench.django_settings``) and its database with the dbqueue Django
system. Django and the backend are imported inside the methods.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

from bench.systems.base import PAYLOAD, System, Tally
from bench.systems.dbqueue_django import DJANGO_DATABASE, setup_django


class DjangoTasksDB(System):
    name = "django-tasks-db"
    label = "Django 6 Tasks + django-tasks-db 0.13"
    # No push_batch (Django Tasks has no batch enqueue) and no cycle (no pop-and-acknowledge
    # call: the worker command is the only consumer).
    workloads = frozenset({"push_single", "drain", "steady", "longtx"})
    # db_worker claims, runs and finishes one task per loop; there is no batch size to set.
    drain_batches = (1,)
    # ~90 tasks/s drained by one worker (measured here): 1,500 tasks take ~17 s per repetition, so a
    # full-run drain figure (3 repetitions) stays under a minute. The report states the size.
    drain_backlog = 1_500
    tables = ("django_tasks_database_dbtaskresult",)
    database = DJANGO_DATABASE

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        setup_django(dsn)
        from django_tasks_db.management.commands.db_worker import Command
        from django_tasks_db.models import DBTaskResult

        from bench.djangoapp import tasks  # after setup: @task validates against the backend

        self.model = DBTaskResult
        self.tasks = tasks
        self.worker_command = Command  # imported before a bench worker prints ready

    def install(self) -> None:
        from django.core.management import call_command

        call_command("migrate", verbosity=0)  # the shared site: dbqueue's tables too

    def reset(self) -> None:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(f'TRUNCATE "{self.model._meta.db_table}"')

    def close(self) -> None:
        from django.db import connections

        connections.close_all()

    def push_single(self, n: int) -> None:
        enqueue = self.tasks.noop.enqueue
        for _ in range(n):
            enqueue(PAYLOAD)  # autocommit: one INSERT, one transaction each

    def fill(self, n: int) -> None:
        self.push_single(n)  # no batch API

    def depth(self) -> int:
        from django.tasks import TaskResultStatus

        statuses = (TaskResultStatus.READY, TaskResultStatus.RUNNING)
        return self.model.objects.filter(status__in=statuses).count()

    def push_payload(self, payload: str) -> None:
        self.tasks.noop.enqueue(payload)

    # -- consumer side ---------------------------------------------------------------------------

    def _run_worker(self, tally: Tally, *options: str) -> None:
        """``manage.py db_worker --no-startup-delay OPTIONS`` in this process, counting each task
        when the worker reports it finished (``task_finished``, sent once the result row says
        SUCCESSFUL). Verbosity 0: the command would otherwise log two lines per task."""
        from django.core.management import call_command
        from django.tasks import TaskResultStatus
        from django.tasks.signals import task_finished

        def finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
            if task_result.status == TaskResultStatus.SUCCESSFUL:
                tally.add(1)

        task_finished.connect(finished, weak=False, dispatch_uid="bench-django-tasks")
        try:
            call_command(self.worker_command(), "--no-startup-delay", *options, verbosity=0)
        finally:
            task_finished.disconnect(dispatch_uid="bench-django-tasks")

    def drain(self, batch: int) -> Tally:
        """``db_worker --batch``: the command's own mode that exits once no task is ready."""
        tally = Tally()
        self._run_worker(tally, "--batch")
        return tally

    def serve(self, batch: int, seconds: float, handle: Callable[[str], None]) -> Tally:
        """``db_worker`` with its default 1 s polling interval, stopped after ``seconds`` by a
        SIGTERM to this process, which the command handles: it finishes the task in hand and
        returns, or exits at once (SystemExit) when it is between tasks.

        The command's handler raises SystemExit wherever the signal lands, also inside its
        own COMMIT of a claimed task; Django's atomic() then fails to restore autocommit on
        the interrupted connection (a DatabaseError). After the stop signal that ends the run
        like the SystemExit does; the connection is closed, since it is unusable."""
        from django.db import DatabaseError, connections

        tally = Tally()
        signals = (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT)  # what the command handles
        handlers = {sig: signal.getsignal(sig) for sig in signals}
        stopping = threading.Event()

        def stop_now() -> None:
            stopping.set()
            os.kill(os.getpid(), signal.SIGTERM)

        stop = threading.Timer(seconds, stop_now)
        self.tasks.HANDLER = handle
        stop.start()
        try:
            self._run_worker(tally)
        except SystemExit:
            pass
        except DatabaseError:
            if not stopping.is_set():
                raise
            connections.close_all()
        finally:
            stop.cancel()
            self.tasks.HANDLER = None
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
        return tally
