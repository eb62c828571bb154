"""Bulk push: ``df.write.format("dbqueue")`` — stage in parallel, publish all at once.

Each Spark task validates its rows with the core's codec (the same checks and errors as
``push_many``) and COPYs them, in one transaction of its own, into the queue's stage table
``<table>_stage`` (UNLOGGED: staged rows are a scratch copy, not worth WAL), tagged with the
write's id and the task's partition and attempt. Nothing a task does is visible to workers.

When every task has succeeded, Spark calls :meth:`QueueWriter.commit` on the driver with the
tasks' commit messages, and only the rows of the attempts named there are published:

* **split queue**: ONE statement draws ids in staging order, inserts the data and meta rows
  and deletes the write's stage rows; the write is all-or-nothing. Its row count is checked
  against the tasks' counts before the transaction commits (a stage row lost, e.g. by a
  server crash truncating the unlogged stage, fails the write instead of half-publishing it).
* **ring queue**: the rows go through the core's ring ``push_many`` (which waits for free
  slots: backpressure) in chunks taken out of the stage in the same transaction that pushes
  them. A write that fits in the ring's capacity is one chunk, so one transaction: all or
  nothing. A larger one cannot be atomic — the ring only has room for it while consumers
  free slots, and they cannot consume uncommitted messages — so it is published chunk by
  chunk; if the ring stays full past ``pushTimeout`` the write fails with QueueFull saying
  how many rows were published, and the rest is deleted from the stage.

When a task fails, Spark calls :meth:`QueueWriter.abort`, which deletes the write's stage
rows: nothing is published. Stage rows of a driver that died between staging and publishing
are deleted by the next write to the queue once older than ``stageRetention`` (a day).
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from dbqueue.arguments import check_priority, check_run_at
from dbqueue.codec import Codec
from dbqueue.discovery import FoundQueue
from dbqueue.drivers.psycopg import PsycopgExecutor
from dbqueue.errors import DBQueueError, InvalidArgument, InvalidPayload, QueueFull
from dbqueue.ring import RingQueue
from dbqueue.schema import STAGE_COLUMNS, stage_statements
from dbqueue.spark.catalog import DIALECT, run, statements
from dbqueue.spark.connection import connect
from dbqueue.spark.types import WritePlan
from dbqueue.spec import Field, FieldKind

if TYPE_CHECKING:
    import pyarrow as pa

#: Stage rows older than this belong to a write whose driver died: deleted by the next write.
STAGE_RETENTION = dt.timedelta(days=1)
#: The rows a ring publish moves per transaction when the write exceeds the capacity.
RING_CHUNK = 10_000
#: A split publish of at least this many rows analyzes the queue's tables before it commits
#: (see spark_analyze_split in spark.sql: 0.25 s for 200,000 rows; below this, autovacuum's
#: analyze, due after 50 rows plus 10% of the table, comes soon enough).
ANALYZE_AFTER = 10_000


class PublishError(DBQueueError):
    """The publish found other rows in the stage than the tasks reported: nothing published."""


@dataclass
class Staged(WriterCommitMessage):
    """What one task attempt staged: its partition, attempt number and row count."""

    part: int
    attempt: int
    rows: int


def _task() -> tuple[int, int]:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:  # pragma: no cover - Spark always runs write() in a task
        raise RuntimeError("dbqueue: write() ran outside a Spark task")
    return context.partitionId(), context.attemptNumber()


class QueueWriter(DataSourceArrowWriter):
    """The writer of one ``df.write`` job (pickled to every executor)."""

    def __init__(self, info: str, queue: FoundQueue, plan: WritePlan) -> None:
        self.info = info
        self.queue = queue
        self.plan = plan
        self.write_id = str(uuid.uuid4())
        self._prepare()

    # -- driver: before the tasks -------------------------------------------------------------

    def _prepare(self) -> None:
        """Create the stage table if needed and drop stage rows of dead writes."""
        spec = self.queue.spec
        stmts = statements(spec)
        with connect(self.info) as conn:
            columns = [r[0] for r in run(conn, stmts["spark_columns"], {"table": spec.stage_table})]
            if columns and columns != [*STAGE_COLUMNS, *spec.field_names]:
                # The queue's fields changed since the stage was made: a write still staging
                # with the old columns then fails its publish's count check, never half-way.
                conn.execute(f"DROP TABLE {DIALECT.quote(spec.stage_table)}")
            for statement in stage_statements(spec, DIALECT):
                conn.execute(statement)
            run(conn, stmts["spark_stage_expire"], {"keep": STAGE_RETENTION})

    # -- executors ----------------------------------------------------------------------------

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Staged:
        """Validate this partition's rows and COPY them into the stage in one transaction."""
        part, attempt = _task()
        spec = self.queue.spec
        codec = Codec(spec, DIALECT)
        names = [DIALECT.quote(n) for n in (*STAGE_COLUMNS[:-1], *spec.field_names)]
        copy_sql = f"COPY {DIALECT.quote(spec.stage_table)} ({', '.join(names)}) FROM STDIN"
        with connect(self.info) as conn, conn.transaction():
            self._open(conn)
            with conn.cursor() as cur, cur.copy(copy_sql) as copy:
                rows = self._copy(copy, iterator, codec, (self.write_id, part, attempt))
        return Staged(part, attempt, rows)

    def _open(self, conn: Any) -> None:
        stmts = statements(self.queue.spec)
        run(conn, stmts["spark_stage_open"], self._key)
        (closed,) = run(conn, stmts["spark_stage_closed"], self._key)[0]
        if closed:
            raise PublishError(
                f"dbqueue write {self.write_id}: the write already ended (the driver published "
                f"or aborted it), this task attempt stages nothing"
            )

    @property
    def _key(self) -> dict[str, Any]:
        return {"write_id": self.write_id}

    def _copy(
        self, copy: Any, iterator: Iterator[pa.RecordBatch], codec: Codec, head: tuple[Any, ...]
    ) -> int:
        """COPY the validated rows of the task's batches; their count."""
        plan, part = self.plan, head[1]
        rows = 0
        for batch in iterator:
            columns = [_values(batch, f) for f in plan.fields]
            priorities = _column(batch, "priority", plan.priority)
            run_ats = _column(batch, "run_at", plan.run_at)
            for i, values in enumerate(zip(*columns, strict=True)):
                try:
                    payload = codec.encode(dict(zip(plan.columns, values, strict=True)))
                    schedule = _schedule(priorities[i], run_ats[i])
                except InvalidPayload as exc:
                    raise InvalidPayload(f"partition {part}, row {rows}: {exc}") from None
                copy.write_row((*head, rows, *schedule, *payload))
                rows += 1
        return rows

    # -- driver: after the tasks --------------------------------------------------------------

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Publish the rows of the successful attempts (see the module docstring)."""
        staged = [m for m in messages if isinstance(m, Staged)]
        if len(staged) != len(messages):
            raise PublishError(f"dbqueue write {self.write_id}: a task left no commit message")
        params = {
            "write_id": self.write_id,
            "parts": [m.part for m in staged],
            "attempts": [m.attempt for m in staged],
        }
        total = sum(m.rows for m in staged)
        try:
            with connect(self.info) as conn:
                self._close(conn)
                if self.queue.ring:
                    self._publish_ring(conn, params, total)
                else:
                    self._publish_split(conn, params, total)
        finally:
            self._clear()

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """A task failed: delete whatever the write staged; nothing is published. Tasks still
        staging finish first, and later ones find the write closed (see spark.sql)."""
        with connect(self.info) as conn:
            self._close(conn)
        self._clear()

    def _close(self, conn: Any) -> None:
        with conn.transaction():
            run(conn, statements(self.queue.spec)["spark_stage_close"], self._key)

    def _clear(self) -> None:
        with connect(self.info) as conn:
            run(conn, statements(self.queue.spec)["spark_stage_abort"], self._key)

    def _publish_split(self, conn: Any, params: dict[str, Any], total: int) -> None:
        spec = self.queue.spec
        stmts = statements(spec)
        with conn.transaction():
            (id_seq,) = run(conn, stmts["spark_id_sequence"], {"table": DIALECT.quote(spec.table)})[
                0
            ]
            (count, _, _) = run(conn, stmts["spark_publish_split"], {**params, "id_seq": id_seq})[0]
            if count != total:
                raise PublishError(
                    f"dbqueue write {self.write_id} to {spec.table!r}: the tasks staged {total} "
                    f"rows but {count} are in the stage (was the server restarted? the stage is "
                    f"unlogged); nothing was published, write the DataFrame again"
                )
            if count >= ANALYZE_AFTER:
                run(conn, stmts["spark_analyze_split"], {})
            conn.execute("SELECT pg_notify(%s, '')", (spec.channel,))

    def _publish_ring(self, conn: Any, params: dict[str, Any], total: int) -> None:
        spec = self.queue.spec
        ring = RingQueue(spec, DIALECT)
        ex = PsycopgExecutor(conn)
        take = statements(spec)["spark_take_staged"]
        capacity = ring.capacity
        chunk = total if total <= capacity else min(RING_CHUNK, max(1, capacity // 2))
        numbers: list[int | None] = []
        while len(numbers) < total:
            try:
                with conn.transaction():
                    rows = run(conn, take, {**params, "n": chunk})
                    if not rows:
                        break
                    payloads = [dict(zip(spec.field_names, r[2:], strict=True)) for r in rows]
                    numbers.extend(ring.push_many(ex, payloads))
            except QueueFull:
                # The chunk's transaction rolled back; commit() then clears the stage.
                raise QueueFull(
                    spec.table,
                    capacity,
                    [*numbers, *([None] * (total - len(numbers)))],
                    f"after waiting push_timeout for free slots during a Spark write of "
                    f"{total} rows (the unpublished rest was dropped from the stage)",
                ) from None
        if len(numbers) != total:
            raise PublishError(
                f"dbqueue write {self.write_id} to {spec.table!r}: the tasks staged {total} rows "
                f"but {len(numbers)} were in the stage; those {len(numbers)} were published"
            )


def _values(batch: pa.RecordBatch, field: Field) -> list[Any]:
    """A column's values as the codec takes them: a JSON field's column holds JSON text."""
    values: list[Any] = batch.column(field.name).to_pylist()
    if field.kind is not FieldKind.JSON:
        return values
    out = []
    for i, text in enumerate(values):
        try:
            out.append(None if text is None else json.loads(text))
        except ValueError as exc:
            raise InvalidPayload(
                f"column {field.name!r}, row {i} of a batch: not JSON text ({exc}); a JSON "
                f"field takes a string column of JSON, e.g. F.to_json(F.struct(...))"
            ) from None
    return out


def _column(batch: pa.RecordBatch, name: str, present: bool) -> list[Any]:
    return batch.column(name).to_pylist() if present else [None] * batch.num_rows


def _schedule(priority: Any, run_at: Any) -> tuple[int | None, dt.datetime | None]:
    """A row's own priority and due time (None: the publish uses 0 and now), checked as
    ``push`` checks them (a Spark timestamp runs to 9999, past MAX_RUN_AT)."""
    if priority is not None:
        try:
            check_priority(priority)
        except InvalidArgument as exc:
            raise InvalidPayload(f"column 'priority': {exc}") from None
    if run_at is not None:
        try:
            check_run_at("run_at", run_at)
        except InvalidArgument as exc:
            raise InvalidPayload(f"column 'run_at': {exc}") from None
    return priority, run_at
