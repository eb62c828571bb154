"""What a worker did per queue since it started, for its metrics (:mod:`dbqueue.metrics`):
items handled, failed attempts by what became of the item, handler durations, expired leases
found and rescued. Counted in plain Python where the worker already counts its run's totals,
so the core needs no metrics library; a scrape reads :meth:`Tallies.snapshot`."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

#: Upper bounds, in seconds, of the handler duration histogram's buckets: a millisecond (a
#: handler that only writes a row) to five minutes (a batch that calls a slow service).
DURATION_BUCKETS = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
)  # fmt: skip


@dataclass(slots=True)
class Durations:
    """A histogram of handler calls: how many took at most each bucket's bound (not
    cumulative here; the exposition sums them), how many took longer, and their total."""

    buckets: list[int] = field(default_factory=lambda: [0] * (len(DURATION_BUCKETS) + 1))
    total: float = 0.0

    def observe(self, seconds: float) -> None:
        self.buckets[bisect.bisect_left(DURATION_BUCKETS, seconds)] += 1
        self.total += seconds

    @property
    def count(self) -> int:
        return sum(self.buckets)

    def cumulative(self) -> list[tuple[str, int]]:
        """(bound, calls that took at most that long) per bucket, ``+Inf`` last: the
        Prometheus exposition's buckets."""
        bounds = [repr(b) for b in DURATION_BUCKETS] + ["+Inf"]
        running, out = 0, []
        for bound, n in zip(bounds, self.buckets, strict=True):
            running += n
            out.append((bound, running))
        return out

    def copy(self) -> Durations:
        return Durations(list(self.buckets), self.total)


@dataclass(slots=True)
class QueueTally:
    """One queue's counts since the worker started."""

    #: Items its handler handled successfully.
    handled: int = 0
    #: Failed attempts of items that will be tried again after their back-off.
    retried: int = 0
    #: Items failed for good (their last attempt failed).
    failed: int = 0
    #: Expired leases a rescue found (a worker died or overran): ready again, or failed.
    expired_leases: int = 0
    #: Of those, the items a rescue made ready again.
    rescued: int = 0
    #: Items whose lease had expired before this worker settled them.
    lost_leases: int = 0
    #: Handler calls: one per item, or one per batch for a batch handler.
    durations: Durations = field(default_factory=Durations)

    def copy(self) -> QueueTally:
        return QueueTally(
            self.handled,
            self.retried,
            self.failed,
            self.expired_leases,
            self.rescued,
            self.lost_leases,
            self.durations.copy(),
        )


class Tallies:
    """The worker's :class:`QueueTally` per queue name. Thread-safe: the handlers' and the
    maintenance threads add, a scrape copies."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tallies: dict[str, QueueTally] = {}

    def start(self, queues: Iterable[str]) -> None:
        """Count ``queues`` from now on even before anything happens to them: a scrape then
        shows their zeros rather than no series at all."""
        with self._lock:
            for queue in queues:
                self._of(queue)

    def _of(self, queue: str) -> QueueTally:
        tally = self._tallies.get(queue)
        if tally is None:
            tally = self._tallies[queue] = QueueTally()
        return tally

    def handled(
        self, queue: str, *, ok: int, retried: int, failed: int, durations: list[float]
    ) -> None:
        """Count a batch's outcomes and its handler calls' durations in seconds."""
        with self._lock:
            tally = self._of(queue)
            tally.handled += ok
            tally.retried += retried
            tally.failed += failed
            for seconds in durations:
                tally.durations.observe(seconds)

    def rescued(self, queue: str, *, ready: int, failed: int) -> None:
        """Count what a rescue found: expired leases made ``ready`` again or ``failed``."""
        with self._lock:
            tally = self._of(queue)
            tally.expired_leases += ready + failed
            tally.rescued += ready

    def lost(self, queue: str, n: int) -> None:
        """Count ``n`` items whose lease had expired before they were settled."""
        with self._lock:
            self._of(queue).lost_leases += n

    def snapshot(self) -> dict[str, QueueTally]:
        """A copy of every queue's tally, by queue name."""
        with self._lock:
            return {name: tally.copy() for name, tally in self._tallies.items()}
