"""Reading a queue's rows: ``spark.read.format("dbqueue")`` (batch) and the stream's batches.

A batch read splits the ids of the items in the chosen states into ranges of about equal
width, one Spark partition each, read in parallel by the executors through a server-side
cursor and handed to Spark as Arrow record batches. Partitions are read in their own
transactions, so a read of a busy queue is not one snapshot: an item that changes state
between two partitions' reads is seen by one of them or by neither (fine for the analyses the
read is for: failures, latency, volumes; the archive job relies on no more than that either).
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import types as T
from pyspark.sql.datasource import DataSourceReader, InputPartition

from dbqueue.discovery import FoundQueue
from dbqueue.errors import InvalidArgument, InvalidPayload
from dbqueue.message import State
from dbqueue.ring import ITEM_STATES
from dbqueue.ring.states import SideState
from dbqueue.spark.catalog import run, statements
from dbqueue.spark.connection import connect
from dbqueue.spark.types import arrow_type

#: The rows a cursor fetches and a record batch holds.
FETCH = 10_000
#: Rows per partition when numPartitions is not given, and the most partitions then.
ROWS_PER_PARTITION = 100_000
MAX_PARTITIONS = 64
SPLIT_STATES = {s.name.lower(): int(s) for s in State}
#: A ring's messages by the state a read names them with: in its slots (ready, leased), and in
#: its side table (leased: moved aside by a pusher; retrying: waiting out a back-off or put
#: aside to be pushed again; failed; spilled: pushed while the ring was full, waiting for room).
RING_SLOT_STATES = {name: int(value) for name, value in ITEM_STATES.items()}
RING_SIDE_STATES = {
    "leased": int(State.LEASED),
    "retrying": int(State.READY),
    "failed": int(State.FAILED),
    "spilled": int(SideState.SPILLED),
}
RING_STATES = [*RING_SLOT_STATES, *(s for s in RING_SIDE_STATES if s not in RING_SLOT_STATES)]
#: Rounds a numeric to its Spark scale as Spark's JDBC source does (half up); room for any
#: value that can fit a Spark decimal (38 digits) and then some.
_DECIMALS = decimal.Context(prec=80, rounding=decimal.ROUND_HALF_UP)


def state_names(source: str) -> dict[int, str]:
    """The ``state`` text a read returns for each state number of a source table ("split",
    "ring" for a ring's slots, "failed" for its side table)."""
    numbers = {"split": SPLIT_STATES, "ring": RING_SLOT_STATES, "failed": RING_SIDE_STATES}
    return {v: k for k, v in numbers[source].items()}


def parse_states(text: str | None, ring: bool) -> list[str]:
    """The states named by a ``state`` option (a comma list; every state when absent)."""
    known = RING_STATES if ring else list(SPLIT_STATES)
    if not text:
        return list(known)
    names = [s.strip().lower() for s in text.split(",") if s.strip()]
    unknown = [s for s in names if s not in known]
    if unknown or not names:
        layout = "a ring" if ring else "a split"
        raise InvalidArgument(
            f"dbqueue: option state {text!r}: {layout} queue's states are {', '.join(known)}"
        )
    return names


def parse_time(text: str | None, option: str) -> dt.datetime | None:
    """An aware datetime from an ISO-8601 option value, or None when absent."""
    if not text:
        return None
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise InvalidArgument(
            f"dbqueue: option {option} {text!r} is not an ISO-8601 time"
        ) from None
    if value.utcoffset() is None:
        raise InvalidArgument(
            f"dbqueue: option {option} {text!r} has no time zone (e.g. 2026-11-01T00:00:00+00:00)"
        )
    return value


@dataclass(frozen=True, slots=True)
class IdRange(InputPartition):
    """One partition of a batch read: ids in [lo, hi) of one source table."""

    source: str  # "split", "ring" (the slots) or "failed" (a ring's failed table)
    lo: int
    hi: int


def spark_decimal(value: decimal.Decimal | None, field: T.StructField) -> decimal.Decimal | None:
    """A numeric as the column's Spark decimal holds it: rounded half up to its scale (an
    unconstrained numeric reads as decimal(38, 18) and may hold more places), or
    InvalidPayload when its integer digits do not fit."""
    if value is None:
        return None
    dtype = field.dataType
    assert isinstance(dtype, T.DecimalType)
    try:
        fitted = value.quantize(decimal.Decimal(1).scaleb(-dtype.scale), context=_DECIMALS)
    except decimal.InvalidOperation:
        fitted = None
    if fitted is None or fitted.adjusted() >= dtype.precision - dtype.scale:
        raise InvalidPayload(
            f"dbqueue: column {field.name!r} holds {value}, which does not fit Spark's "
            f"{dtype.simpleString()} (an unconstrained numeric reads as decimal(38,18)): "
            f"declare the field with max_digits and decimal_places"
        )
    return fitted


def to_batch(
    rows: Sequence[Sequence[Any]], schema: T.StructType, names: dict[int, str]
) -> pa.RecordBatch:
    """Rows of a read statement (the meta columns, then the payload) as an Arrow batch of the
    read schema; the state number becomes its name."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema.fields]
    types = [arrow_type(f.dataType) for f in schema.fields]
    arrays = []
    for i, (field, values, kind) in enumerate(zip(schema.fields, columns, types, strict=True)):
        if i == 1:
            values = tuple(names[int(v)] for v in values)
        elif isinstance(field.dataType, T.DecimalType):
            values = tuple(spark_decimal(v, field) for v in values)
        arrays.append(pa.array(values, type=kind))
    arrow_schema = pa.schema(
        [pa.field(f.name, kind, f.nullable) for f, kind in zip(schema.fields, types, strict=True)]
    )
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


def id_ranges(lo: int, end: int, parts: int) -> list[tuple[int, int]]:
    """``[lo, end)`` cut into ``parts`` ranges whose widths differ by one at most (fewer when
    the range holds fewer ids)."""
    span = end - lo
    parts = max(1, min(parts, span))
    cuts = [lo + span * i // parts for i in range(parts + 1)]
    return list(itertools.pairwise(cuts))


def shares(counts: Sequence[int], parts: int) -> list[int]:
    """``parts`` partitions shared by tables of ``counts`` rows in proportion to them, at
    least one each (largest remainders first)."""
    if not counts:
        return []
    total = sum(counts)
    parts = max(parts, len(counts))
    exact = [(parts - len(counts)) * c / total for c in counts]
    out = [1 + int(e) for e in exact]
    by_remainder = sorted(range(len(counts)), key=lambda i: int(exact[i]) - exact[i])
    for i in by_remainder[: parts - sum(out)]:
        out[i] += 1
    return out


class QueueReader(DataSourceReader):
    """A batch read of one queue's items in some states (pickled to every executor)."""

    def __init__(
        self,
        info: str,
        queue: FoundQueue,
        schema: T.StructType,
        states: list[str],
        before: dt.datetime | None,
        partitions: int | None,
    ) -> None:
        if before is not None and not set(states) <= {"done", "failed"}:
            raise InvalidArgument(
                "dbqueue: option finishedBefore applies to finished items only: "
                "use it with state done and/or failed"
            )
        self.info = info
        self.queue = queue
        self.schema = schema
        self.before = before
        self.states = states
        self.requested = partitions

    def _sources(self) -> list[tuple[str, list[int]]]:
        """The tables to read and the state numbers to read in each."""
        if not self.queue.ring:
            return [("split", [SPLIT_STATES[s] for s in self.states])]
        sources = []
        for source, numbers in (("ring", RING_SLOT_STATES), ("failed", RING_SIDE_STATES)):
            wanted = [numbers[s] for s in self.states if s in numbers]
            if wanted:
                sources.append((source, wanted))
        return sources

    def partitions(self) -> list[IdRange]:
        """Id ranges of about equal width over the items to read (driver). ``numPartitions``
        is the total over the tables read (a ring's slots and its failed table share it);
        without it, one range per 100,000 rows. An empty read has no ranges: Spark then
        reads one empty partition of its own (see :meth:`read`)."""
        stmts = statements(self.queue.spec)
        found: list[tuple[str, int, int]] = []  # source, first id, id after the last
        counts: list[int] = []
        with connect(self.info) as conn:
            for source, numbers in self._sources():
                params = {"states": numbers, "before": self.before}
                lo, hi, count = run(conn, stmts[f"spark_bounds_{source}"], params)[0]
                if count:
                    found.append((source, lo, hi + 1))
                    counts.append(count)
        total = sum(counts)
        parts = self.requested or min(MAX_PARTITIONS, math.ceil(total / ROWS_PER_PARTITION))
        return [
            IdRange(source, a, b)
            for (source, lo, end), share in zip(found, shares(counts, parts), strict=True)
            for a, b in id_ranges(lo, end, share)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The items of one id range, in id order (executor). Any other partition is the
        empty one Spark reads when :meth:`partitions` found nothing to read."""
        if not isinstance(partition, IdRange):
            return
        stmt = statements(self.queue.spec)[f"spark_read_{partition.source}"]
        names = state_names(partition.source)
        params = {
            "lo": partition.lo,
            "hi": partition.hi,
            "states": dict(self._sources())[partition.source],
            "before": self.before,
            "capacity": self.queue.spec.options.capacity,
        }
        with (
            connect(self.info) as conn,
            conn.transaction(),
            conn.cursor(name="dbqueue_spark_read") as cur,
        ):
            cur.itersize = FETCH
            cur.execute(stmt.parts[0], params)
            while rows := cur.fetchmany(FETCH):
                yield to_batch(rows, self.schema, names)
