"""The keeper: the upkeep of the queues a process consumes through the API alone.

A queue's upkeep rounds (:mod:`dbqueue.upkeep.rounds`: a split queue's heads advanced, tables
compacted once a long transaction that grew them has ended) must run wherever the queue is
consumed, or its pops slow down under a held horizon and its tables stay grown after it: in a
worker, its maintenance thread runs them; a Spark stream's driver runs them as it plans each
batch. Everything else that pops (a consumer loop of its own, a web process, a service
calling ``pop_batch``) gets them from the keeper, without calling anything: one daemon thread
per process.

- A pop (``pop_batch``, ``ack_pop``) *touches* its queue (:func:`touch`): a dictionary
  lookup and a clock read, nothing more, once the queue is known.
- Every ``CHECK_EVERY`` seconds the keeper runs a round of each queue touched in the last
  :data:`ACTIVE_FOR` seconds, on a connection of its own to that queue's database, opened from
  the pop's connection's parameters (``upkeep_connector()`` of its executor: a new psycopg
  connection, autocommit, named ``dbqueue keeper`` in ``pg_stat_activity``); a queue that
  another thread of the process upkeeps (a worker's) is left to it, and each queue is left
  for :data:`GRACE` seconds first, for that thread to show.
- Once no queue of a database has been touched for ``ACTIVE_FOR`` seconds its connection is
  closed, and once none of any database, the thread ends (the next touch starts it again).
  (So a test database can be dropped soon after its last pop: PostgreSQL's DROP DATABASE
  waits five seconds for the other sessions to leave.)

``DBQUEUE_KEEPER=0`` in the environment, or :func:`disable`, turns it off (Django:
``DBQUEUE_KEEPER = False`` in the settings); a process that forks keeps none of its parent's
keeper (its connections belong to the parent). Databases without dead versions (SQLite) need
none.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from dbqueue.errors import QueueTableMissing
from dbqueue.executor import Executor
from dbqueue.statements import Statements
from dbqueue.upkeep.compaction import CHECK_EVERY

#: Seconds a queue is looked after since its last pop, and a database's connection kept.
ACTIVE_FOR = 2.0
#: Seconds a queue is first left to whoever else may upkeep it: a worker's pops can come before
#: its maintenance thread's first round.
GRACE = 1.0
#: After a connection to a database could not be opened, or a round failed, the next try
#: waits this long.
RETRY_AFTER = 5.0
#: What turns the keeper off in the environment.
ENVIRONMENT = "DBQUEUE_KEEPER"

log = logging.getLogger("dbqueue.keeper")

#: An executor's ``upkeep_connector()``: a key naming the database (no password in it), and
#: how to open a new autocommit executor on it.
Connector = tuple[Hashable, Callable[[], Executor]]


@dataclass(eq=False)
class _Queue:
    """A queue the keeper looks after: the core queue, when a pop last touched it, and where
    its database's connection comes from."""

    queue: Statements
    key: Hashable
    connect: Callable[[], Executor]
    touched: float
    retry_at: float = 0.0

    def __post_init__(self) -> None:
        self.retry_at = self.touched + GRACE


@dataclass(eq=False)
class _Database:
    """A database's connection of the keeper's."""

    ex: Executor | None = None
    retry_at: float = 0.0
    warned: set[str] = field(default_factory=set)


class Keeper:
    """The keeper of one process (:data:`KEEPER`); see the module."""

    def __init__(self) -> None:
        self.enabled = os.environ.get(ENVIRONMENT, "1").lower() not in ("0", "off", "false", "no")
        self._queues: dict[int, _Queue] = {}
        self._databases: dict[Hashable, _Database] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        #: Connections a forked child inherited: never used, never closed (closing one would
        #: end its parent's session).
        self._inherited: list[Any] = []

    def touch(self, queue: Statements, ex: Executor) -> None:
        """A pop on ``ex`` served ``queue``: look after it (see the module)."""
        if not self.enabled or not queue.dialect.keeps_dead_versions:
            return
        known = self._queues.get(id(queue))
        if known is not None and known.queue is queue:
            known.touched = time.monotonic()
            return
        self._add(queue, ex)

    def _add(self, queue: Statements, ex: Executor) -> None:
        connector: Callable[[], Connector | None] | None = getattr(ex, "upkeep_connector", None)
        if connector is None or _upkept_elsewhere(queue):
            return
        found = connector()
        if found is None:
            return
        key, connect = found
        with self._lock:
            self._queues[id(queue)] = _Queue(queue, key, connect, time.monotonic())
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="dbqueue-keeper", daemon=True)
                self._thread = thread
                thread.start()

    def _forked(self) -> None:
        """In a child process, at the fork: forget the parent's keeper (its thread is not
        here, and its connections stay the parent's)."""
        self._lock = threading.Lock()  # the parent's may have been held by another thread
        self._inherited += [d.ex for d in self._databases.values() if d.ex is not None]
        self._queues.clear()
        self._databases.clear()
        self._thread = None

    def _run(self) -> None:
        while True:
            with self._lock:
                now = time.monotonic()
                for ident, kept in list(self._queues.items()):
                    if now - kept.touched > ACTIVE_FOR or _upkept_elsewhere(kept.queue):
                        del self._queues[ident]
                queues = list(self._queues.values())
                idle = [k for k in self._databases if all(q.key != k for q in queues)]
                closing = [self._databases.pop(k) for k in idle]
                if not queues:
                    self._thread = None
            for database in closing:
                _close(database.ex)
            if not queues:
                return
            for kept in queues:
                if kept.retry_at <= now:
                    self._round(kept, now)
            time.sleep(CHECK_EVERY)

    def _round(self, kept: _Queue, now: float) -> None:
        database = self._databases.setdefault(kept.key, _Database())
        if database.ex is None:
            if database.retry_at > now:
                return
            try:
                database.ex = kept.connect()
            except Exception as exc:
                database.retry_at = now + RETRY_AFTER
                self._warn(database, "connect", "the keeper cannot connect (%s)", exc)
                return
        try:
            kept.queue._upkeep.run(database.ex, keeper=True)  # type: ignore[attr-defined]
        except QueueTableMissing:
            # Dropped since its last pop (a migration, a test's teardown): nothing to keep.
            with self._lock:
                self._queues.pop(id(kept.queue), None)
            return
        except Exception as exc:
            kept.retry_at = now + RETRY_AFTER
            self._warn(
                database, "round", "queue %s: the keeper's upkeep failed (%s)",
                kept.queue.spec.table, exc,
            )  # fmt: skip
            _close(database.ex)
            database.ex = None
            return
        database.warned.clear()

    @staticmethod
    def _warn(database: _Database, what: str, msg: str, *args: object) -> None:
        """Log a failure once until the database's connection works again."""
        if what not in database.warned:
            database.warned.add(what)
            log.warning(msg, *args)

    def stop(self) -> None:
        """Stop looking after every queue now, and close the keeper's connections (what a
        test does before it drops a database; the next pop starts again)."""
        with self._lock:
            self._queues.clear()
            databases = list(self._databases.values())
            self._databases.clear()
        for database in databases:
            _close(database.ex)


def _upkept_elsewhere(queue: Statements) -> bool:
    """Whether someone other than the keeper ran the queue's upkeep lately (a worker's
    maintenance thread: the keeper leaves the queue to it)."""
    upkeep = getattr(queue, "_upkeep", None)
    return upkeep is not None and bool(upkeep.run_elsewhere(ACTIVE_FOR))


def _close(ex: Executor | None) -> None:
    close = getattr(ex, "close", None)
    if close is not None:
        try:
            close()
        except Exception:  # a connection already broken: nothing left to close
            log.debug("closing a keeper connection failed", exc_info=True)


#: The process's keeper.
KEEPER = Keeper()
touch = KEEPER.touch
stop = KEEPER.stop
if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=KEEPER._forked)


def disable() -> None:
    """Turn the keeper off in this process (its queues then get no upkeep unless a worker or
    the caller runs ``queue.upkeep()``), and close its connections."""
    KEEPER.enabled = False
    KEEPER.stop()


def enable() -> None:
    """Turn the keeper on again (see :func:`disable`)."""
    KEEPER.enabled = True
