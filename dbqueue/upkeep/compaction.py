"""Compaction: a queue's tables given back what a long transaction made them grow by, without
changing what any snapshot sees.

While a transaction holds the xmin horizon (see :mod:`dbqueue.upkeep`), every message leaves
row versions behind that no one may remove, and the tables grow; once it ends, VACUUM frees
that space for reuse but gives the files back only from their tails, which the live rows
(a ring's slots, a split queue's backlog) keep. Compaction rewrites the tables to what is
left: ``VACUUM (FULL)``.

Why VACUUM FULL, and not what dbqueue did before: PostgreSQL documents TRUNCATE and the
table-rewriting forms of ALTER TABLE as not MVCC-safe ("Caveats" of its concurrency chapter):
a snapshot taken before them, read after, sees the table empty. dbqueue used to copy a
queue's live rows out, TRUNCATE, and copy them back; a REPEATABLE READ compactor lost the
pushes committed while it waited for its lock (its snapshot did not see them, TRUNCATE
discarded them), and a ``pg_dump`` whose snapshot was taken a moment before a compaction held
the queue empty. VACUUM FULL (like CLUSTER) copies every version that some snapshot may still
see, with its transaction ids: a snapshot sees the same rows before and after, and what the
copy leaves out is what a plain VACUUM may remove. Nothing else is ever used to give space
back.

How a compaction runs, outside any transaction (VACUUM cannot run in one):

1. a plain ``VACUUM`` of the queue's tables removes what no snapshot needs (``SKIP_LOCKED``:
   a table that autovacuum is working on is left to it);
2. what it leaves in ``pg_class`` says, per table, whether a snapshot still pins its pages
   (see :data:`PINNED_PAGES`) and how many rows a rewrite would copy;
3. only if no table would copy more than :data:`MAX_ROWS` rows, ``VACUUM (FULL,
   SKIP_LOCKED)`` rewrites them, each in a transaction of its own under its ACCESS EXCLUSIVE
   lock, taken only when no other statement holds one (tried again for up to
   :data:`LOCK_TIMEOUT`). While a snapshot holds the horizon the dead versions are many, and a
   rewrite would copy them all under its lock, for nothing: it is not attempted.

:func:`compact_if_grown` decides when (:class:`Growth`): once the tables have doubled since
their last compaction, or have stopped growing while still grown (the transaction that held
the horizon ended), and again after a skip, sooner at first, at most :data:`RETRY_MAX` apart.

What it cannot do:

- A rewrite never waits for a lock: a transaction that holds a lock on the queue's tables
  (one that pushed into the queue and stays open, a ``pg_dump`` reading them) makes it skip,
  and it is tried again later. Waiting would stop every producer and consumer queued behind
  the lock.
- Only the tables' owner (or a superuser) may VACUUM them: for another role, PostgreSQL skips
  the table with a warning, and compaction reports the skip.
- A queue holding more than ``MAX_ROWS`` rows in one table (a backlog, done items kept by
  ``keep_done``) is not rewritten: the copy would hold the lock too long. Plain VACUUM
  (autovacuum, or step 1 here) still makes the space reusable. A ring of many slots keeps
  them in segments of at most 6,000 (:func:`dbqueue.schema.ring_segment_bounds`), each a
  table of its own.
- SQLite rewrites pages in place and keeps no old versions: nothing to compact there.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from typing import NamedTuple

from dbqueue.errors import TransactionStateError
from dbqueue.executor import Executor
from dbqueue.outage import sqlstate
from dbqueue.rows import ValueRow
from dbqueue.statements import Statements

#: How long a rewrite keeps trying to find the tables free of other statements' locks (it
#: never waits for one: see ``_rewrite``), trying again every ``RETRY_PAUSE`` seconds.
LOCK_TIMEOUT = dt.timedelta(milliseconds=200)
RETRY_PAUSE = 0.01
#: A table that would copy more rows than this is not rewritten: the copy would hold the lock
#: past the 100 ms a queue may stall. Measured with the TRUNCATE-and-copy compaction this
#: replaces, on 2 cores, quiet (bench/reports/2026-11-26-compaction-cost.md): 10,000 rows 54 ms
#: (split) and 56 ms (ring), 20,000 rows 102 and 131 ms; VACUUM FULL copies the same rows and
#: rebuilds the same indexes.
MAX_ROWS = 12_000
#: A table of at least this many pages that VACUUM left with less than half of them all
#: visible is pinned by a transaction holding the horizon: its rewrite would copy every version
#: on them and give back little; it waits. Once the horizon moves on, VACUUM removes the dead
#: versions and marks nearly every page all visible (a ring's grown slot table measured 0 of
#: 750 pages all visible while held, 745 just after). Read from pg_class, which VACUUM writes
#: as it ends: its count of dead versions, in the statistics, takes in afterwards what other
#: sessions had done before it (their counts are sent up to a second late), and a ring read
#: 15,000 dead versions there a moment after a VACUUM had left none.
PINNED_PAGES = 16
#: Compact once the tables have grown by this share of their compacted size, and by at least
#: ``MIN_GROWTH`` bytes: a compaction then copies at most about as many bytes as it gives back.
#: At 0.15 a split queue with a backlog copied its backlog every second for a sixth of it in
#: dead versions (bench/reports/2026-11-26-longtx-2.md).
GROWTH = 1.0
MIN_GROWTH = 4 * 1024 * 1024
#: Once the tables have stopped growing for ``SETTLE`` seconds (the transaction that held the
#: horizon ended: pruning and vacuum keep up again) while still ``SETTLED_GROWTH`` over their
#: compacted size (and ``MIN_GROWTH``), one more compaction gives back what it left.
SETTLE = 5.0
SETTLED_GROWTH = 0.2

#: The SQLSTATE of a role that may not vacuum a table (PostgreSQL mostly warns and skips it
#: instead, which ``_rewrite`` finds in its file not changing).
_NOT_ALLOWED = "42501"


@dataclass(frozen=True, slots=True)
class CompactResult:
    """What :func:`compact` did: whether it rewrote the tables, their bytes before and after
    (tables, indexes and TOAST), how long its rewrite took (waiting for each table's lock,
    then copying it: the longest the queue's statements waited for it), and why it did not
    rewrite them, if it did not."""

    compacted: bool
    size_before: int
    size_after: int
    seconds: float = 0.0
    skipped: str | None = None


class KeptRow(NamedTuple):
    """A row of ``<layout>_kept``: one of the queue's tables as the last VACUUM left it
    (``pg_class``, which VACUUM updates as it ends): its live rows, its pages, those of them
    all visible (every row on them visible to every snapshot), and its file (a rewrite gives
    it a new one)."""

    relation: str
    live: int
    pages: int
    visible: int
    filenode: int


def compact(
    queue: Statements,
    ex: Executor,
    *,
    lock_timeout: dt.timedelta = LOCK_TIMEOUT,
    before: int | None = None,
) -> CompactResult:
    """Compact the queue's tables (see the module docstring) on ``ex``, which must not be in
    a transaction; a skip (a snapshot still needs the dead versions, too many rows, a table
    that other statements kept locked for ``lock_timeout``, a role that may not vacuum) is
    reported in the result, not raised. ``before``: the tables' size, if the caller has just
    measured it."""
    if not queue.dialect.keeps_dead_versions:
        return CompactResult(False, 0, 0, skipped=f"{queue.dialect.name} keeps no dead versions")
    if ex.in_transaction():
        raise TransactionStateError(
            "compact() runs VACUUM, which PostgreSQL runs only outside a transaction: call it "
            "outside atomic() / on a connection or session with no transaction open"
        )
    if before is None:
        before = size(queue, ex)
    queue._run_outside(ex, "vacuum", {})
    tables = queue._rows(ex, "kept", {}, KeptRow)
    if not tables:  # a stale spec (segments renamed?) finds nothing: nothing to rewrite
        return CompactResult(False, before, before, skipped="none of its tables was found")
    vacuumed = size(queue, ex)
    pinned = [t for t in tables if t.pages >= PINNED_PAGES and t.visible * 2 < t.pages]
    if pinned:
        pages = sum(t.pages - t.visible for t in pinned)
        why = (
            f"a transaction holds the xmin horizon: {pages} pages of the queue's tables keep "
            f"row versions a snapshot may still see; compacted once it ends"
        )
        return CompactResult(False, before, vacuumed, skipped=why)
    worst = max(tables, key=lambda t: t.live)
    if worst.live > MAX_ROWS:
        why = f"{worst.relation} holds {worst.live} rows, more than {MAX_ROWS} to copy under a lock"
        return CompactResult(False, before, vacuumed, skipped=why)
    return _rewrite(queue, ex, tables, before, lock_timeout)


def _rewrite(
    queue: Statements,
    ex: Executor,
    tables: list[KeptRow],
    before: int,
    lock_timeout: dt.timedelta,
) -> CompactResult:
    """VACUUM (FULL, SKIP_LOCKED) of the queue's tables, again every ``RETRY_PAUSE`` while a
    table was skipped (another statement held a lock on it) and ``lock_timeout`` has not
    passed. SKIP_LOCKED: a rewrite that waited for a table's lock would make every statement
    on the queue wait behind it; one that takes only free tables stalls nobody but for its
    copy. (Nor is a session setting such as lock_timeout used: behind a pooler in transaction
    mode it would stay on a server connection that another client gets next; so would a
    session advisory lock, so two compactors are not kept apart: the second one's rewrite
    finds the tables locked, or small.)"""
    start = time.monotonic()
    deadline = start + lock_timeout.total_seconds()
    old = {t.relation: t.filenode for t in tables}
    while True:
        try:
            queue._run_outside(ex, "compact", {})
        except Exception as exc:
            if sqlstate(exc) != _NOT_ALLOWED:
                raise
            return CompactResult(False, before, size(queue, ex), skipped=f"may not vacuum ({exc})")
        now = queue._rows(ex, "kept", {}, KeptRow)
        # PostgreSQL skips a table it cannot lock at once, or that the role may not vacuum,
        # with a warning and no error: its file is then the same.
        left = sorted(t.relation for t in now if old.get(t.relation) == t.filenode)
        if not left or time.monotonic() + RETRY_PAUSE > deadline:
            break
        time.sleep(RETRY_PAUSE)
    took = time.monotonic() - start
    after = size(queue, ex)
    if left:
        why = (
            f"{', '.join(left)} not rewritten: locked by other statements for "
            f"{lock_timeout.total_seconds() * 1000:.0f} ms, or not the role's to vacuum"
        )
        return CompactResult(False, before, after, took, why)
    return CompactResult(True, before, after, took)


def size(queue: Statements, ex: Executor) -> int:
    """The bytes of the queue's hot tables (with their indexes and TOAST); 0 where the
    database keeps no dead versions."""
    if not queue.dialect.keeps_dead_versions:
        return 0
    return int(queue._rows(ex, "size", {}, ValueRow)[0].value)


#: Seconds between two looks at a queue's size by a consumer that compacts it (the worker's
#: maintenance thread, the Spark stream's driver, the keeper of API consumers): a look is one
#: cheap statement.
CHECK_EVERY = 0.1

#: After a compaction that could not run, the next attempt waits this long, doubled at each
#: skip up to ``RETRY_MAX``: a transaction holding the horizon may stay for hours, and each
#: attempt vacuums the grown tables, but once it ends the tables must be back to their size
#: within a minute (each attempt then finds the horizon free).
#: The VACUUM an attempt begins with is not wasted while the horizon stays held, though it can
#: free nothing: measured at 1,000 msg/s under a 300-s snapshot, attempts that skipped it while
#: the same transaction held the horizon let the split queues' service collapse to 150-550
#: msg/s once their tables passed ~150 MB, 240 s into the hold (p99 31 s core, 48 ms through
#: SQLAlchemy), where vacuuming at every attempt served 0.997x with a p99 of 231 ms
#: (bench/reports/2026-12-07-longtx-skip-vacuum.md, -longtx-vacuum-spikes.md). Why it helps is
#: not established yet; the dips of service that remain coincide with autovacuum's runs.
RETRY_FIRST, RETRY_MAX = 1.0, 15.0


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
        unless it is small (a consumer may start while a transaction holds the horizon, or
        after one that left the tables grown; the compaction's result is the baseline), then
        once it has grown by ``GROWTH`` over the baseline, or by ``SETTLED_GROWTH`` and
        stopped growing (see ``SETTLE``), and after a skip at its retry time while still
        grown that much."""
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
        if self._retry_at and grown >= self.baseline * SETTLED_GROWTH:
            return True  # a skipped compaction's retry
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


def compact_if_grown(queue: Statements, ex: Executor, growth: Growth) -> CompactResult | None:
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
