"""Compaction: a queue's tables given back the row versions a long transaction pins.

A transaction left open anywhere in a PostgreSQL database (a report in REPEATABLE READ, a
session idle in transaction, a replica's ``hot_standby_feedback``, a logical slot) holds the
xmin horizon: no version that died after its snapshot may be removed, by vacuum or by page
pruning. A queue kills versions at every message (a ring updates its slot three times, a
split queue inserts, updates and deletes), so under a held horizon its tables fill with dead
versions that every statement walks through: the queue slows down and grows without bound,
and after the transaction ends VACUUM frees the space but gives none of it back.

TRUNCATE does not care about the horizon: it gives the table's file back and starts a new one.
A queue holds few live rows (a ring its ``capacity`` slots, a split queue its backlog), so
compaction copies them out, truncates and copies them back, in one transaction, under an
ACCESS EXCLUSIVE lock: for a ring of 2,000 slots a few milliseconds during which the queue's
statements wait, with every row kept as it was (numbers, states, leases, payloads). Nothing
else changes: no statement of the hot paths, no delivery guarantee.

:func:`compact_if_grown` is what a worker calls a few times a second: it compacts when the
tables have doubled over their compacted size (a ring that nobody pins does not grow at all;
see ``RING_FILLFACTOR``), so compaction happens only while versions pile up, and once more
when they stop growing after the transaction ends, bringing the tables back to their
compacted size.

What it cannot do:

- Compaction waits for its lock at most ``LOCK_TIMEOUT``: a transaction that holds a lock on
  the queue's tables (one that pushed into the queue and stays open, or a long transaction
  that read the queue itself) makes it skip, and it tries again at the next check. Waiting
  longer would stop every producer behind the lock.
- TRUNCATE is not MVCC-safe: a REPEATABLE READ or SERIALIZABLE transaction whose snapshot is
  older than a compaction, and that first reads the queue after it, sees the tables empty
  (PostgreSQL documents this of TRUNCATE). Its pops find nothing; a push into a split queue
  works; a ring push, or an ack of a message it did not find, raises
  :class:`~dbqueue.errors.SnapshotTooOld` (retry the transaction, as after a serialization
  failure). Nothing is lost: the rows are there for every newer snapshot. Queues run in READ
  COMMITTED, where each statement that waited for the lock takes its snapshot after it; a
  repeatable-read reader takes the queue's lock before its snapshot (``LOCK TABLE ... IN
  ACCESS SHARE MODE`` first, as dbqueue's Spark reader does).
- A split queue with more than ``MAX_ROWS`` rows (a backlog, or done items kept by
  ``keep_done``) is not compacted: the copy would hold the lock too long. A ring of many
  slots keeps them in segments (:func:`dbqueue.schema.ring_segment_bounds`), compacted one
  after the other, each in a transaction of its own; a ring whose segments hold more than
  ``MAX_ROWS`` slots each (over 96,000 slots) is not compacted. A ring's side table (failed
  messages, and those waiting aside) is compacted with its last slots while both together
  fit in ``MAX_ROWS``, else on its own while it fits.
- SQLite rewrites pages in place and keeps no old versions: nothing to compact there.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dbqueue.errors import QueueUnavailable, TransactionStateError
from dbqueue.executor import Executor
from dbqueue.outage import sqlstate
from dbqueue.rows import ValueRow
from dbqueue.spec import advisory_key

if TYPE_CHECKING:
    from dbqueue.layout import Layout

#: How long compaction waits for its lock. While it waits, every statement on the queue waits
#: behind it, so this is also the longest stall a compaction that does not get its lock causes.
LOCK_TIMEOUT = dt.timedelta(milliseconds=20)
#: A queue with more rows than this is not compacted: the copy would hold the lock past the
#: 100 ms a queue may stall. Measured on 2 cores, quiet (bench/reports/
#: 2026-11-26-compaction-cost.md): 10,000 rows 54 ms (split) and 56 ms (ring), 20,000 rows
#: 102 and 131 ms; under a loaded run a ring of 10,000 slots took 110 ms.
MAX_ROWS = 12_000
#: Compact once the tables have grown by this share of their compacted size (their live
#: rows), and by at least ``MIN_GROWTH`` bytes: a compaction then copies at most about as many
#: bytes as it gives back. At 0.15 a split queue with a backlog copied its backlog every
#: second for a sixth of it in dead versions; at 3,000-4,000 msg/s the copies fell behind
#: the traffic and the backlog grew past ``MAX_ROWS`` (bench/reports/2026-11-26-longtx-2.md).
GROWTH = 1.0
MIN_GROWTH = 256 * 1024
#: Once the tables have stopped growing for ``SETTLE`` seconds (the long transaction ended:
#: vacuum keeps up again) while still ``SETTLED_GROWTH`` over their compacted size (and
#: ``MIN_GROWTH``), one more compaction gives back what the transaction left.
SETTLE = 5.0
SETTLED_GROWTH = 0.2

#: Why a compaction did not run when another process was compacting the same queue: not worth
#: a warning (it is being done).
BUSY = "another process is compacting it"

#: SQLSTATEs of a compaction that could not run: its lock was not granted in time; the
#: database role may not TRUNCATE the queue's tables.
_LOCKED, _NOT_ALLOWED = "55P03", "42501"


#: One statement of a compaction: the layout's operation and its parameters.
Step = tuple[str, dict[str, Any]]
#: What a compaction runs (see ``Layout.compaction_plan``): transactions of steps, one after
#: the other, each holding its lock only while it copies its own tables.
Plan = list[tuple[Step, ...]]


@dataclass(frozen=True, slots=True)
class CompactResult:
    """What :func:`compact` did: whether it rewrote the tables, their bytes before and after
    (tables, indexes and TOAST), how long its longest transaction took (waiting for its
    lock, then holding it: the longest the queue's statements waited for it), and why it
    did not run, if it did not (a compaction in several transactions that stops part way
    reports that it did not)."""

    compacted: bool
    size_before: int
    size_after: int
    seconds: float = 0.0
    skipped: str | None = None


def compact(
    queue: Layout,
    ex: Executor,
    *,
    lock_timeout: dt.timedelta = LOCK_TIMEOUT,
    before: int | None = None,
) -> CompactResult:
    """Rewrite the queue's tables to their live rows (see the module docstring), in a
    transaction of its own; a skip (lock not granted in time, another compactor, too many
    rows, TRUNCATE not allowed) is reported in the result, not raised. ``before``: the
    tables' size, if the caller has just measured it."""
    if not queue.dialect.keeps_dead_versions:
        return CompactResult(False, 0, 0, skipped=f"{queue.dialect.name} keeps no dead versions")
    if ex.in_transaction():
        raise TransactionStateError(
            "compact() runs in a transaction of its own: inside the caller's, its lock on the "
            "queue's tables would stop every producer and worker until that transaction ends"
        )
    table = queue.spec.table
    if before is None:
        before = size(queue, ex)
    plan = queue.compaction_plan(ex, MAX_ROWS)
    if not plan:
        why = (
            "a ring with consumer groups is not compacted"
            if queue.spec.options.groups and queue.spec.options.capacity is not None
            else f"more than {MAX_ROWS} rows to copy under the lock"
        )
        return CompactResult(False, before, before, skipped=why)
    ms = max(1, round(lock_timeout.total_seconds() * 1000))
    claim = {"lock_timeout": f"{ms}ms", "compact_key": advisory_key(f"dbqueue-compact:{table}")}
    longest = 0.0
    for steps in plan:
        start = time.monotonic()
        try:
            with ex.atomic():
                if not queue._run(ex, "compact_claim", claim)[0][1]:
                    return CompactResult(False, before, before, longest, BUSY)
                for operation, params in steps:
                    queue._run(ex, operation, params)
        except QueueUnavailable as exc:
            if sqlstate(exc) != _LOCKED:
                raise
            waited = max(longest, time.monotonic() - start)
            return CompactResult(False, before, before, waited, f"lock not granted in {ms} ms")
        except Exception as exc:
            if sqlstate(exc) != _NOT_ALLOWED:
                raise
            return CompactResult(
                False, before, before, skipped=f"the database role may not TRUNCATE it ({exc})"
            )
        longest = max(longest, time.monotonic() - start)
    return CompactResult(True, before, size(queue, ex), longest)


def size(queue: Layout, ex: Executor) -> int:
    """The bytes of the queue's hot tables (with their indexes and TOAST); 0 where the
    database keeps no dead versions."""
    if not queue.dialect.keeps_dead_versions:
        return 0
    return int(queue._rows(ex, "size", {}, ValueRow)[0].value)


#: Seconds between two looks at a queue's size by a consumer that compacts it (the worker's
#: maintenance thread, the Spark stream's driver): a look is one cheap statement. Under a held
#: horizon every pop walks the versions that died since the last compaction. At 5,000 msg/s,
#: looking every 0.1 s instead of 0.25 s took p99 from 5.7x to 1.7-2.2x its value without the
#: transaction, the longest compaction from 165 to 40 ms, and the tables 60 s after from 3.4x
#: to 0.6x their working size; at 1,000 msg/s nothing changed (bench/reports/
#: 2026-11-27-longtx-7.md, -longtx-8.md, -longtx-check-every-0.1.md).
CHECK_EVERY = 0.1

#: After a compaction that could not run, the next attempt waits this long, doubled at each
#: skip up to ``RETRY_MAX`` (a transaction holding the queue's lock may stay for hours).
RETRY_FIRST, RETRY_MAX = 1.0, 60.0


class Growth:
    """When to compact a queue, per process: its size after its last compaction (or when
    first seen, or the smallest seen since), and when to try again after a skip. Thread-safe
    enough: a race costs one check."""

    def __init__(self) -> None:
        self.baseline: int | None = None
        self._retry_at = 0.0
        self._pause = RETRY_FIRST
        self._last = 0  # the size at the last look, and since when it has been that size
        self._since = time.monotonic()

    def due(self, current: int) -> bool:
        """True if a queue of ``current`` bytes should be compacted now: at the first look,
        unless it is small (a worker may start while a long transaction holds the horizon,
        or after one that left the tables grown; the compaction's result is the baseline),
        then once it has grown by ``GROWTH`` over the baseline, or by ``SETTLED_GROWTH``
        and stopped growing (see ``SETTLE``)."""
        now = time.monotonic()
        if current != self._last:
            self._last, self._since = current, now
        if now < self._retry_at:
            return False
        if self.baseline is None and current >= MIN_GROWTH:
            return True
        if self.baseline is None or current < self.baseline:
            self.baseline = current
            return False
        grown = current - self.baseline
        if grown < MIN_GROWTH:
            return False
        settled = now - self._since >= SETTLE and grown >= self.baseline * SETTLED_GROWTH
        return settled or grown >= self.baseline * GROWTH

    def record(self, result: CompactResult) -> None:
        """Take a compaction's result into account: a new baseline, or a later retry."""
        if result.compacted:
            self.baseline = result.size_after
            self._retry_at, self._pause = 0.0, RETRY_FIRST
        else:
            self._retry_at = time.monotonic() + self._pause
            self._pause = min(self._pause * 2, RETRY_MAX)


def compact_if_grown(queue: Layout, ex: Executor, growth: Growth) -> CompactResult | None:
    """Compact if the tables have grown enough since ``growth``'s baseline (see
    :class:`Growth`); the result, or None if no compaction was due."""
    if not queue.dialect.keeps_dead_versions:
        return None
    current = size(queue, ex)
    if not growth.due(current):
        return None
    result = compact(queue, ex, before=current)
    growth.record(result)
    return result
