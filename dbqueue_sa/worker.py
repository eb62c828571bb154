"""The core worker (:class:`dbqueue.worker.Worker`) over a database URL: each queue class with a
handler becomes a consumer whose operations run on the worker thread's own autocommit
connection (psycopg 3 on PostgreSQL, sqlite3 on SQLite), and whose handler receives instances
of the mapped class.

The worker does not go through an ``Engine``: a worker thread holds one connection for its
whole life, each pop, ack and fail commits on its own (autocommit), and the core's executors
over bare DB-API connections (:mod:`dbqueue.drivers`) do exactly that, with statements prepared
server-side. The URL is the application's SQLAlchemy URL, whatever driver it names (an
``asyncpg`` or ``aiosqlite`` URL included): the worker connects to the same database with the
drivers the core runs on.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import ArgumentError

from dbqueue.conninfo import libpq_conninfo as conninfo_from_params
from dbqueue.drivers import executor_for
from dbqueue.errors import InvalidArgument, UnsupportedDatabase
from dbqueue.executor import Executor
from dbqueue.spec import QueueSpec
from dbqueue.wakeup import PollPolicy
from dbqueue.worker import Consumer, Worker
from dbqueue.worker.loop import SUMMARY_EVERY
from dbqueue.worker_queue import ExecutorQueue
from dbqueue_sa.handlers import Handler
from dbqueue_sa.queue import SAQueue
from dbqueue_sa.ring_queue import RingSAQueue
from dbqueue_sa.tables import DIALECTS, core_dialect

#: The sync SQLAlchemy driver the CLI's own Engine uses for each supported database.
SYNC_DRIVERS = {"postgresql": "psycopg", "sqlite": "pysqlite"}


def database_url(url: str | sa.URL) -> sa.URL:
    """``url`` parsed, with the sync driver dbqueue runs on (``postgresql+psycopg``,
    ``sqlite+pysqlite``) whatever driver it named. Raises InvalidArgument for a URL that
    does not parse, UnsupportedDatabase for another database, and InvalidArgument for an
    in-memory SQLite database (every connection would see a database of its own)."""
    try:
        parsed = sa.make_url(url)
    except ArgumentError:
        # The message of SQLAlchemy's error does not name the URL; ours leaves the password
        # out, since it ends up in logs.
        raise InvalidArgument(
            "the database URL does not parse; expected a SQLAlchemy URL such as "
            "postgresql+psycopg://user:password@host/dbname or sqlite:///path/to/file.db"
        ) from None
    backend = parsed.get_backend_name()
    if backend not in DIALECTS:
        raise UnsupportedDatabase(
            f"dbqueue supports {', '.join(sorted(DIALECTS))}; the URL names {backend!r}"
        )
    if backend == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise InvalidArgument(
            "an in-memory SQLite database cannot be shared by a worker's connections: name "
            "the database file (sqlite:///path/to/file.db)"
        )
    return parsed.set(drivername=f"{backend}+{SYNC_DRIVERS[backend]}")


def libpq_conninfo(url: sa.URL) -> str:
    """The libpq connection string of a PostgreSQL URL, read as SQLAlchemy's psycopg dialect
    reads it: the query string (``sslmode``, a socket directory in ``host``) overrides the
    URL's parts."""
    params: dict[str, Any] = url.translate_connect_args(database="dbname", username="user")
    for key, value in url.query.items():
        params[key] = value if isinstance(value, str) else ",".join(value)
    return conninfo_from_params(params)


def _open_psycopg(url: sa.URL) -> Any:
    import psycopg

    return psycopg.connect(libpq_conninfo(url), autocommit=True)


def _open_sqlite(url: sa.URL) -> Any:
    from dbqueue.drivers.sqlite import connect

    return connect(str(url.database))


#: How a worker thread opens its autocommit DB-API connection, per backend of DIALECTS.
OPENERS: dict[str, Callable[[sa.URL], Any]] = {
    "postgresql": _open_psycopg,
    "sqlite": _open_sqlite,
}


class Connector:
    """Opens the worker's connections to the database of one URL."""

    def __init__(self, url: str | sa.URL) -> None:
        self.url = database_url(url)
        #: Names the database in logs and for sharing a listener (no password).
        self.key = self.url.render_as_string(hide_password=True)
        backend = self.url.get_backend_name()
        self.dialect = core_dialect(backend)
        self._open = OPENERS[backend]

    def executor(self) -> Executor:
        """A new executor over a new autocommit connection (one per worker thread)."""
        return executor_for(self.dialect, self._open(self.url))

    def listen_factory(self) -> Callable[[], Any] | None:
        """Opens a psycopg connection to LISTEN on, where the database has notifications."""
        if not self.dialect.supports_listen_notify:
            return None
        url = self.url
        return lambda: _open_psycopg(url)


def consumer_name(spec: QueueSpec) -> str:
    """How logs and stats name a consumer: its table, and a consumer group's name
    (``orders[email]``)."""
    return spec.table if spec.group is None else f"{spec.table}[{spec.group}]"


def build_worker(
    handlers: Iterable[Handler],
    *,
    url: str | sa.URL,
    concurrency: int = 1,
    batch_size: int | None = None,
    burst: bool = False,
    max_messages: int | None = None,
    poll: PollPolicy | None = None,
    reconnect_for: float | None = None,
    summary_every: float = SUMMARY_EVERY,
    health_file: str | os.PathLike[str] | None = None,
    metrics_port: int | None = None,
) -> Worker:
    """A worker running ``handlers`` on the database of ``url`` (call ``.run()``);
    ``reconnect_for``, ``summary_every``, ``health_file`` and ``metrics_port``: see
    :class:`dbqueue.worker.Worker`.

    Connects once to find the core queue each class uses for that database (so an
    application that runs a worker in its own process shares its ring's pop claims with it),
    and to check that every ring table has the declared capacity. Raises
    :class:`~dbqueue.errors.QueueTableMissing` or
    :class:`~dbqueue.errors.RingCapacityMismatch` before anything runs. A consumer
    group's handler (``@handler(Model, group=...)``) runs on that group's deliveries
    (``Model.queue.group(name)``), named ``table[group]`` in logs and stats.
    """
    connector = Connector(url)
    selected = list(handlers)
    engine = sa.create_engine(connector.url, poolclass=sa.NullPool)
    try:
        with engine.connect() as connection:
            consumers = []
            for h in selected:
                queue: SAQueue[Any] = h.model.queue
                if isinstance(queue, RingSAQueue):
                    queue.check(connection)
                if h.group is not None:  # a consumer group's handler runs on its group
                    queue = queue.group(h.group)
                consumers.append(
                    Consumer(
                        ExecutorQueue(
                            queue.core(connection),
                            connector.executor,
                            # Popped messages as instances of the class (acks and fails
                            # take them back: they carry id and attempts).
                            make=queue.instance,
                            name=consumer_name(queue.spec),
                            listen=connector.listen_factory(),
                            database=connector.key,
                        ),
                        h.func,
                        batch=h.batch,
                        batch_size=batch_size or h.batch_size,
                    )
                )
    finally:
        engine.dispose()
    return Worker(
        consumers,
        concurrency=concurrency,
        burst=burst,
        max_messages=max_messages,
        poll=poll,
        reconnect_for=reconnect_for,
        summary_every=summary_every,
        health_file=health_file,
        metrics_port=metrics_port,
    )
