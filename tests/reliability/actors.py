"""The Django processes of the reliability tests that run against a database of their own:
``python -m tests.reliability.actors <role> <log> ...``, with
``DJANGO_SETTINGS_MODULE=tests.reliability.actor_settings`` (the test app's queues).

Each writes what it did to its log, one line per event, flushed at once, and stops once the
file ``<log>.stop`` exists:

* ``producer <log> <first> <count>``: pushes ``Job`` items ``n = first ... first+count-1``,
  each in a ``transaction.atomic()`` that sleeps 0-10 ms before it commits; logs ``+n`` once
  the block committed, ``!n <error>`` for an attempt that failed (rolled back: the same ``n``
  is pushed again).
* ``consumer <log>``: ``pop_batch(20)`` then ``ack``, logging each item's ``n`` between the
  two; once stopped, it drains the queue first.
* ``compactor <log> <seconds>``: ``Job.queue.compact()`` every ``seconds``, a line per result
  (``<time> <compacted 0/1> <skipped>``), after a first line saying the isolation levels of
  its connection (outside a transaction and in ``atomic()``).
* ``traffic <log> <first>``: pushes, pops and acks on ``Job`` and ``RingJob`` (a thread each),
  compacts both through ``Model.queue.compact()`` (a third thread), and the keeper looks after
  them; every compaction of the process, by whatever path, is logged (see
  :func:`trace_compactions`), and so is every push (``push <table> <n> <time>``, once it
  returned) and pop (``pop <table> <n> <time>``, before its ack).
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from dbqueue.upkeep import compaction

#: The compacting paths, by the name of the thread a compaction ran on (other threads are
#: named after the path they stand for: "core", "django", "sqlalchemy").
THREAD_PATHS = {"dbqueue-keeper": "keeper", "dbqueue-maintenance": "worker"}


@dataclass(frozen=True)
class Compaction:
    """One compaction some path of a process ran: which, on which queue, whether it rewrote
    the tables (and why not), and when it started and ended (``time.time()``)."""

    path: str
    table: str
    compacted: bool
    start: float
    end: float
    skipped: str = ""

    def line(self) -> str:
        flag = int(self.compacted)
        times = f"{self.start:.6f} {self.end:.6f}"
        return f"compact {self.path} {self.table} {flag} {times} {self.skipped}"

    @classmethod
    def parse(cls, line: str) -> Compaction:
        _, path, table, flag, start, end, *skipped = line.split(" ")
        return cls(path, table, flag == "1", float(start), float(end), " ".join(skipped))


def trace_compactions(record: Callable[[Compaction], None]) -> Callable[[], None]:
    """Have every compaction this process runs, by any path (``compact()`` of any front, a
    worker's maintenance thread, the keeper: all of them end in
    :func:`dbqueue.upkeep.compaction.compact`), handed to ``record``; return what undoes it."""
    original = compaction.compact

    def traced(queue: Any, ex: Any, **kwargs: Any) -> compaction.CompactResult:
        start = time.time()
        result = original(queue, ex, **kwargs)
        name = threading.current_thread().name
        record(
            Compaction(
                THREAD_PATHS.get(name, name), queue.spec.table, result.compacted, start,
                time.time(), result.skipped or "",
            )
        )  # fmt: skip
        return result

    compaction.compact = traced  # type: ignore[assignment]

    def undo() -> None:
        compaction.compact = original  # type: ignore[assignment]

    return undo


class Log:
    """A log file shared by the threads of a process: a line at a time, flushed at once."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._out: TextIO = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        self._lock = threading.Lock()

    def write(self, line: str) -> None:
        with self._lock:
            self._out.write(line + "\n")

    @property
    def stopped(self) -> bool:
        return Path(self.path + ".stop").exists()


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def producer(log: Log, first: int, count: int) -> None:
    from django.db import DatabaseError, transaction

    from tests.django.testapp.models import Job

    rng = random.Random(first)
    for n in range(first, first + count):
        while True:
            try:
                with transaction.atomic():
                    Job.queue.push(name=f"j{n}", n=n)
                    time.sleep(rng.uniform(0.0, 0.010))
            except DatabaseError as exc:
                log.write(f"!{n} {_error(exc)}")
                time.sleep(0.02)
                continue
            log.write(f"+{n}")
            break


def consumer(log: Log) -> None:
    from django.db import DatabaseError

    from tests.django.testapp.models import Job

    while True:
        try:
            jobs = Job.queue.pop_batch(20)
            if jobs:
                log.write("\n".join(str(job.n) for job in jobs))
                Job.queue.ack(jobs)
        except DatabaseError as exc:
            log.write(f"! {_error(exc)}")
            time.sleep(0.02)
            continue
        if not jobs:
            if log.stopped:
                return
            time.sleep(0.005)


def compactor(log: Log, every: float) -> None:
    from django.db import DatabaseError, connection, transaction

    from tests.django.testapp.models import Job

    with connection.cursor() as cursor:
        cursor.execute("SHOW default_transaction_isolation")
        default = cursor.fetchone()[0]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SHOW transaction_isolation")
        in_atomic = cursor.fetchone()[0]
    log.write(f"isolation {default.replace(' ', '_')} {in_atomic.replace(' ', '_')}")
    while not log.stopped:
        try:
            result = Job.queue.compact()
        except DatabaseError as exc:
            log.write(f"! {_error(exc)}")
        else:
            log.write(f"{time.time():.6f} {int(result.compacted)} {result.skipped or ''}")
        time.sleep(every)


def traffic(log: Log, first: int) -> None:
    """See the module: the Django front's share of tests/reliability/test_backups.py."""
    from django.db import DatabaseError, connection

    from tests.django.testapp.models import Job, RingJob

    if os.environ.get("DBQUEUE_ACTOR_MIN_GROWTH"):
        compaction.MIN_GROWTH = int(os.environ["DBQUEUE_ACTOR_MIN_GROWTH"])
    trace_compactions(lambda c: log.write(c.line()))
    failures: list[str] = []

    def guarded(body: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                while not log.stopped:
                    try:
                        body()
                    except DatabaseError as exc:
                        log.write(f"! {threading.current_thread().name} {_error(exc)}")
                        time.sleep(0.05)
            except BaseException as exc:  # a bug of the test's: said, and the run fails
                failures.append(_error(exc))
                raise
            finally:
                connection.close()

        return run

    def moving(model: Any, numbers: Iterator[int]) -> Callable[[], None]:
        table = model._meta.db_table

        def step() -> None:
            batch = [next(numbers) for _ in range(5)]
            model.queue.push_many([{"name": f"j{n}", "n": n} for n in batch])
            now = time.time()
            log.write("\n".join(f"push {table} {n} {now:.6f}" for n in batch))
            items = model.queue.pop_batch(5)
            now = time.time()
            if items:
                log.write("\n".join(f"pop {table} {item.n} {now:.6f}" for item in items))
                model.queue.ack(items)
            time.sleep(0.02)

        return step

    def compacting() -> None:
        Job.queue.compact()
        RingJob.queue.compact()
        time.sleep(0.1)

    bodies = {
        "traffic-job": moving(Job, iter(range(first, sys.maxsize))),
        "traffic-ring": moving(RingJob, iter(range(first, sys.maxsize))),
        "django": compacting,
    }
    threads = [threading.Thread(target=guarded(b), name=name) for name, b in bodies.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise SystemExit(f"traffic failed: {failures}")


def main(argv: list[str]) -> None:
    import django

    django.setup()
    role, path, *rest = argv
    log = Log(path)
    if role == "producer":
        producer(log, int(rest[0]), int(rest[1]))
    elif role == "consumer":
        consumer(log)
    elif role == "compactor":
        compactor(log, float(rest[0]))
    elif role == "traffic":
        traffic(log, int(rest[0]))
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
