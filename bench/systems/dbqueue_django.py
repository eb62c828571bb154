"""dbqueue's split queue through the Django manager (``Model.queue``)."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from bench.systems.base import PAYLOAD, System, Tally, serve_loop

if TYPE_CHECKING:
    from dbqueue_django.models import BaseQueueModel
    from dbqueue_django.queue import DjangoQueue

DJANGO_DATABASE = "django"


def setup_django(dsn: str) -> None:
    """Configure Django for the bench site on ``dsn`` (once per process)."""
    import django
    from django.conf import settings

    if settings.configured:
        return
    os.environ["BENCH_DJANGO_DSN"] = dsn
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.django_settings"
    django.setup()


class DBQueueDjango(System):
    """A queue model's ``Model.queue`` on the ``default`` alias (or ``alias``: the popper of a
    client pair). The ring system (``dbqueue_ring_django``) is this one with another model."""

    name = "dbqueue-django"
    label = "dbqueue split queue, Django manager"
    workloads = frozenset(
        {"push_single", "push_batch", "drain", "cycle", "pairs", "steady", "bloat", "longtx"}
    )
    tables: ClassVar[tuple[str, ...]] = (
        "benchapp_benchjob",
        "benchapp_benchjob_meta",
        "benchapp_benchjob_head",
    )
    database = DJANGO_DATABASE

    def __init__(self, dsn: str, alias: str | None = None) -> None:
        super().__init__(dsn)
        setup_django(dsn)
        self.model = self.queue_model()
        self.queue: DjangoQueue[Any] = (
            self.model.queue if alias is None else self.model.queue.using(alias)
        )

    @staticmethod
    def queue_model() -> type[BaseQueueModel]:
        """The model whose queue is measured (imported once Django is set up)."""
        from bench.djangoapp.models import BenchJob

        return BenchJob

    def install(self) -> None:
        from django.core.management import call_command

        call_command("migrate", verbosity=0)

    def reset(self) -> None:
        # TRUNCATE, as every system resets: purge() is a DELETE, and the dead tuples it leaves
        # would slow the next repetition's scans (that effect is the bloat workload's subject).
        from django.db import connection

        tables = ", ".join(f'"{table}"' for table in self.tables)
        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {tables}")

    def popper(self) -> System:
        """The same queue through a second alias on the same database (a connection of its
        own: Django's are per thread and alias)."""
        from bench.django_settings import POPPER  # after setup_django: it reads the DSN

        return type(self)(self.dsn, POPPER)

    def close(self) -> None:
        from django.db import connections

        connections.close_all()

    def push_single(self, n: int) -> None:
        push = self.queue.push
        for _ in range(n):
            push(payload=PAYLOAD)

    def push_batch(self, n: int, batch: int) -> None:
        rows: list[dict[str, Any]] = [{"payload": PAYLOAD}] * batch
        for start in range(0, n, batch):
            self.queue.push_many(rows[: min(batch, n - start)], batch_size=batch)

    def depth(self) -> int:
        stats = self.queue.stats()
        return int(stats["ready"] + stats["scheduled"] + stats["leased"])

    def drain(self, batch: int) -> Tally:
        tally, queue = Tally(), self.queue
        while items := queue.pop_batch(batch):
            for _item in items:
                pass  # the no-op handler
            queue.ack(items)
            tally.add(len(items))
        return tally

    def push_payload(self, payload: str) -> None:
        self.queue.push(payload=payload)

    def serve(self, batch: int, seconds: float, handle: Callable[[str], None]) -> Tally:
        queue = self.queue
        return serve_loop(lambda: queue.pop_batch(batch), queue.ack, seconds, handle)

    def take(self, batch: int) -> int:
        queue = self.queue
        items = queue.pop_batch(batch)
        queue.ack(items)
        return len(items)


class DBQueueDjangoWorker(DBQueueDjango):
    """The same queue drained by dbqueue's own worker: the loop behind ``runqueueworker``
    (one thread per process, batches of ``batch``), woken by LISTEN/NOTIFY when idle."""

    name = "dbqueue-worker"
    label = "dbqueue runqueueworker (Django)"
    workloads = frozenset({"drain", "steady", "longtx"})

    def _worker(self, batch: int, handle: Callable[[Any], None], *, burst: bool) -> Any:
        from dbqueue_django.handlers import Handler
        from dbqueue_django.worker import build_worker

        return build_worker([Handler(self.model, handle, False, batch)], burst=burst)

    def drain(self, batch: int) -> Tally:
        tally = Tally()
        self._worker(batch, lambda item: tally.add(1), burst=True).run(handle_signals=False)
        return tally

    def serve(self, batch: int, seconds: float, handle: Callable[[str], None]) -> Tally:
        tally = Tally()

        def run(item: Any) -> None:
            handle(item.payload)
            tally.add(1)

        worker = self._worker(batch, run, burst=False)
        timer = threading.Timer(seconds, worker.stop)
        compactions = _Compactions(tally)
        logger = logging.getLogger("dbqueue.worker")
        logger.setLevel(logging.INFO)  # the compactions are logged at INFO
        logger.addHandler(compactions)
        timer.start()
        try:
            worker.run(handle_signals=False)
        finally:
            timer.cancel()
            logger.removeHandler(compactions)
        return tally


class _Compactions(logging.Handler):
    """Reads the worker's log of each compaction it ran (how long it took) into a tally: what
    an operator sees of them too."""

    def __init__(self, tally: Tally) -> None:
        super().__init__(logging.INFO)
        self.tally = tally

    def emit(self, record: logging.LogRecord) -> None:
        if isinstance(record.msg, str) and record.msg.startswith("queue %s: compacted,"):
            self.tally.compactions.append(float(record.args[3]) / 1000)  # type: ignore[index,arg-type]
