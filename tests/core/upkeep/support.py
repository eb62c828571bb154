"""What the upkeep tests share: compactions tried again while another test pins the horizon."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable

from dbqueue import RingQueue, SplitQueue
from dbqueue.executor import Executor
from dbqueue.upkeep import compaction

#: How a compaction's skip begins when a transaction holds the xmin horizon.
HELD = "a transaction holds the xmin horizon"


def compacted(
    queue: RingQueue | SplitQueue,
    ex: Executor,
    lock_timeout: dt.timedelta = compaction.LOCK_TIMEOUT,
) -> compaction.CompactResult:
    """``queue.compact(ex)``, tried again for a while until it compacts: a test on another
    xdist worker may hold a transaction with an xid meanwhile, which pins the horizon of every
    database of the server (each new snapshot's xmin is at most that xid)."""
    return _retried(lambda: queue.compact(ex, lock_timeout=lock_timeout), _not_compacted)


def unpinned(queue: RingQueue | SplitQueue, ex: Executor) -> compaction.CompactResult:
    """``queue.compact(ex)``, tried again for a while as long as it finds the horizon held (by
    a test on another xdist worker, see :func:`compacted`)."""
    return while_held(lambda: queue.compact(ex))


def while_held(compact: Callable[[], compaction.CompactResult]) -> compaction.CompactResult:
    """Call ``compact`` (any front's ``compact``) again for a while as long as it skips for a
    held horizon: a test on another xdist worker may hold one (see :func:`compacted`)."""
    return _retried(compact, _held)


def _not_compacted(result: compaction.CompactResult) -> bool:
    return not result.compacted


def _held(result: compaction.CompactResult) -> bool:
    return result.skipped is not None and result.skipped.startswith(HELD)


def _retried(
    compact: Callable[[], compaction.CompactResult],
    again: Callable[[compaction.CompactResult], bool],
) -> compaction.CompactResult:
    """``compact()``, called again every 0.2 s for up to 60 s while ``again`` says so."""
    deadline = time.monotonic() + 60
    while True:
        result = compact()
        if not again(result) or time.monotonic() > deadline:
            return result
        time.sleep(0.2)
