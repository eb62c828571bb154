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
"""

from __future__ import annotations

import random
import sys
import threading
import time
from pathlib import Path
from typing import TextIO


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
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
