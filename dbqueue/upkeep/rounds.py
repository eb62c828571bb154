"""One queue's upkeep in this process: a round of it is what whoever consumes the queue runs a
few times a second on a connection of its own, outside any transaction: a worker's
maintenance thread, the keeper of API consumers (:mod:`dbqueue.upkeep.keeper`), a Spark
stream's driver.

A round advances a split queue's heads (:mod:`dbqueue.upkeep.heads`) every
:data:`HEADS_EVERY` seconds and compacts the queue's tables when they have grown
(:func:`dbqueue.upkeep.compaction.compact_if_grown`); on a database that keeps no dead
versions (SQLite) it does nothing.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from dbqueue.executor import Executor
from dbqueue.statements import Statements
from dbqueue.upkeep import compaction
from dbqueue.upkeep.heads import Heads

#: Seconds between two steps of a split queue's heads: each is one or two cheap statements, and
#: the pops of a held horizon walk what the items taken since the last advance left behind
#: (two steps: at 1,000 msg/s about a thousand entries).
HEADS_EVERY = 0.5


@dataclass(slots=True)
class UpkeepReport:
    """What a round did: how many heads moved, and the compaction it ran (None: none was
    due)."""

    heads: int = 0
    compaction: compaction.CompactResult | None = None


class Upkeep:
    """The upkeep of one core queue in this process. Thread-safe: a round that finds another
    thread running one does nothing (the worker's maintenance thread and the keeper may share
    a queue)."""

    def __init__(self, queue: Statements) -> None:
        self.queue = queue
        self.growth = compaction.Growth()
        keeps = queue.dialect.keeps_dead_versions
        split = queue.layout == "split" and not queue.spec.fans_out
        self.heads = Heads() if keeps and split else None
        self._next_heads = 0.0
        self._lock = threading.Lock()
        #: When a round last ran (monotonic), and whether the keeper ran it.
        self.last_run, self.last_by_keeper = -float("inf"), False

    def run(self, ex: Executor, *, keeper: bool = False) -> UpkeepReport:
        """A round on ``ex``, a connection with no transaction open (see the module);
        ``keeper``: run by the keeper of API consumers (:mod:`dbqueue.upkeep.keeper`), which
        leaves a queue to anyone else who runs its rounds."""
        report = UpkeepReport()
        if not self.queue.dialect.keeps_dead_versions or not self._lock.acquire(blocking=False):
            return report
        try:
            now = self.last_run = time.monotonic()
            self.last_by_keeper = keeper
            if self.heads is not None and now >= self._next_heads:
                self._next_heads = now + HEADS_EVERY
                report.heads = self.heads.step(self.queue, ex)
            report.compaction = compaction.compact_if_grown(self.queue, ex, self.growth)
        finally:
            self._lock.release()
        return report

    def run_elsewhere(self, within: float) -> bool:
        """Whether someone other than the keeper (a worker's maintenance thread) ran a round in
        the last ``within`` seconds."""
        return not self.last_by_keeper and time.monotonic() - self.last_run < within
