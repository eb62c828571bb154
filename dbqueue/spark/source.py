"""The ``dbqueue`` PySpark data source: options, and the reader, writer and stream it makes.

Options (names are case-insensitive, values strings as Spark passes them):

==========================  ======================================================  =========
option                      meaning                                                 default
==========================  ======================================================  =========
``url`` or ``dsn``          the PostgreSQL database (URL or libpq string)           required
``queue``                   the queue's table name                                  required
``state``                   batch read: comma list (ready, leased, done, failed;    all
                            a ring: ready, leased, retrying, failed, spilled)
``finishedBefore``          batch read of done/failed items: finished before this   —
                            ISO-8601 time
``numPartitions``           batch read: id ranges read in parallel; stream: the     rows/100k
                            slices a micro-batch is read in                         ; 2
``maxMessagesPerBatch``     stream: items leased per micro-batch                    10000
``leaseSeconds``            stream: a batch's lease (extended while it runs)        300
``rescueSeconds``           stream: how often the stream gives expired leases back  30
                            (the queue's rescue, as a worker runs it)
``maxAttempts``             stream: the queue's max_attempts (the rescue fails an   5
                            item leased that many times)
``keepDone``                stream: the queue keeps done items (``keep_done``):     false
                            acks mark them done for the archive job
``whenFull``                write to a ring: what a push that finds it full does    wait
                            (spill, raise, wait: the queue's ``when_full``)
``pushTimeoutSeconds``      write to a ring, whenFull wait: how long to wait for    60
                            free slots
``maxPayloadBytes``         write: the largest payload accepted                     262144
==========================  ======================================================  =========
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from pyspark.sql import types as T
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader

from dbqueue.discovery import FoundQueue
from dbqueue.errors import InvalidArgument
from dbqueue.spark.catalog import load_queue
from dbqueue.spark.connection import connect, conninfo_from
from dbqueue.spark.reader import QueueReader, parse_states, parse_time
from dbqueue.spark.stream import QueueStream
from dbqueue.spark.types import plan_write, read_schema
from dbqueue.spark.writer import QueueWriter
from dbqueue.spec import QueueOptions, WhenFull

DEFAULT_MAX_PER_BATCH = 10_000
DEFAULT_LEASE = dt.timedelta(seconds=300)
DEFAULT_PUSH_TIMEOUT = dt.timedelta(seconds=60)
DEFAULT_STREAM_PARTITIONS = 2
DEFAULT_RESCUE_INTERVAL = dt.timedelta(seconds=30)
BOOLEANS = {"true": True, "false": False}


def int_option(options: Mapping[str, str], name: str, default: int | None) -> int | None:
    """A positive integer option, or ``default`` when absent."""
    text = options.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise InvalidArgument(f"dbqueue: option {name} must be a positive integer, got {text!r}")
    return value


def seconds_option(options: Mapping[str, str], name: str, default: dt.timedelta) -> dt.timedelta:
    """A positive number of seconds, or ``default`` when absent."""
    text = options.get(name)
    if text is None or text == "":
        return default
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise InvalidArgument(f"dbqueue: option {name} must be a positive number, got {text!r}")
    return dt.timedelta(seconds=value)


def bool_option(options: Mapping[str, str], name: str) -> bool:
    """A ``true``/``false`` option (any case); false when absent."""
    text = options.get(name)
    if text is None or text == "":
        return False
    if text.lower() not in BOOLEANS:
        raise InvalidArgument(f"dbqueue: option {name} must be true or false, got {text!r}")
    return BOOLEANS[text.lower()]


class DBQueueDataSource(DataSource):
    """``spark.read`` / ``df.write`` / ``spark.readStream`` ``.format("dbqueue")``."""

    @classmethod
    def name(cls) -> str:
        return "dbqueue"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.info = conninfo_from(options)
        table = options.get("queue")
        if not table:
            raise InvalidArgument("dbqueue: option queue (the queue's table name) is required")
        self.table = table
        self._queue: FoundQueue | None = None

    @property
    def queue(self) -> FoundQueue:
        """The queue as the database describes it (looked up once, on the driver)."""
        if self._queue is None:
            defaults = QueueOptions()
            payload = int_option(self.options, "maxPayloadBytes", defaults.max_payload_bytes)
            # The queue's behaviour that the database does not record: what the caller says
            # it is (the application declares it in its model or spec).
            # A Spark write is a pipeline: by default it waits for room (backpressure).
            when_full = (self.options.get("whenFull") or WhenFull.WAIT).lower()
            if when_full not in set(WhenFull):
                raise InvalidArgument(
                    f"dbqueue: option whenFull must be one of {', '.join(WhenFull)}, "
                    f"got {self.options.get('whenFull')!r}"
                )
            timeout = seconds_option(self.options, "pushTimeoutSeconds", DEFAULT_PUSH_TIMEOUT)
            options = QueueOptions(
                max_payload_bytes=payload or defaults.max_payload_bytes,
                when_full=WhenFull(when_full),
                push_timeout=timeout if when_full == WhenFull.WAIT else defaults.push_timeout,
                max_attempts=int_option(self.options, "maxAttempts", defaults.max_attempts)
                or defaults.max_attempts,
                keep_done=bool_option(self.options, "keepDone"),
            )
            with connect(self.info) as conn:
                self._queue = load_queue(conn, self.table, options)
        return self._queue

    def schema(self) -> T.StructType:
        """The read schema: id, state, priority, attempts, enqueued_at, run_at, lease_until,
        last_error, then the payload fields."""
        return read_schema(self.queue.spec)

    def reader(self, schema: T.StructType) -> DataSourceReader:
        queue = self.queue
        return QueueReader(
            self.info,
            queue,
            read_schema(queue.spec),
            parse_states(self.options.get("state"), queue.ring),
            parse_time(self.options.get("finishedBefore"), "finishedBefore"),
            int_option(self.options, "numPartitions", None),
        )

    def writer(self, schema: T.StructType, overwrite: bool) -> QueueWriter:
        if overwrite:
            raise InvalidArgument(
                "dbqueue: a write appends messages to a queue; mode('overwrite') would have to "
                "delete the queue's messages. Use mode('append')"
            )
        queue = self.queue
        return QueueWriter(self.info, queue, plan_write(queue.spec, schema, ring=queue.ring))

    def streamReader(self, schema: T.StructType) -> DataSourceStreamReader:
        queue = self.queue
        return QueueStream(
            self.info,
            queue,
            read_schema(queue.spec),
            int_option(self.options, "maxMessagesPerBatch", DEFAULT_MAX_PER_BATCH)
            or DEFAULT_MAX_PER_BATCH,
            seconds_option(self.options, "leaseSeconds", DEFAULT_LEASE),
            int_option(self.options, "numPartitions", DEFAULT_STREAM_PARTITIONS)
            or DEFAULT_STREAM_PARTITIONS,
            seconds_option(self.options, "rescueSeconds", DEFAULT_RESCUE_INTERVAL),
        )
