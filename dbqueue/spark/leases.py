"""The leases of a stream's batches in flight: the driver keeps them alive while Spark works.

A micro-batch may take longer than its lease (a slow sink, a big batch, a cluster waiting for
executors); its items would then be given back by a rescue and delivered twice. The stream's
driver therefore keeps every batch it leased and has not yet acknowledged in a
:class:`LeaseKeeper`, whose thread extends their leases every third of the lease, on a
connection of its own (the stream's planning calls use the other one meanwhile). When the
query stops the keeper stops: the batches still in flight keep their leases until those run
out (the next run of the query acknowledges or replays them, see :mod:`dbqueue.spark.stream`).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from dbqueue.drivers.psycopg import PsycopgExecutor
from dbqueue.front import AnyQueue, ExecutorFront
from dbqueue.message import Message
from dbqueue.spark.connection import connect

log = logging.getLogger("dbqueue.spark")

Token = tuple[int, int]

#: The shortest interval between two extensions, whatever the lease.
MIN_INTERVAL = 0.2


class LeaseKeeper:
    """Batches in flight by batch number, their leases extended by a thread while any is."""

    def __init__(self, info: str, core: Callable[[], AnyQueue], lease: dt.timedelta) -> None:
        self.info = info
        self.core = core
        self.lease = lease
        self.interval = max(MIN_INTERVAL, lease.total_seconds() / 3)
        #: How many leases the keeper extended, and how many it found no longer held.
        self.extended = 0
        self.lost = 0
        self._batches: dict[int, list[Token]] = {}
        self._lock = threading.Lock()
        # Held while an extension runs, and while the stream acknowledges: the two statements
        # lock the same rows, and in different orders they deadlock (seen in CI).
        self._busy = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, batch: int, tokens: list[Token]) -> None:
        """Keep ``batch``'s leases alive until :meth:`drop`; starts the thread at first use."""
        if not tokens:
            return
        with self._lock:
            self._batches[batch] = tokens
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="dbqueue-spark-leases", daemon=True
            )
            self._thread.start()

    def drop(self, through: int) -> None:
        """Stop extending the batches numbered ``through`` and before (acknowledged)."""
        with self._lock:
            for batch in [b for b in self._batches if b <= through]:
                del self._batches[batch]

    @contextmanager
    def settling(self, through: int) -> Iterator[None]:
        """No extension while the body acknowledges the batches numbered ``through`` and
        before; they are dropped after it (kept, and extended, if it raised)."""
        with self._busy:
            yield
            self.drop(through)

    def held(self) -> int:
        """How many items the batches in flight hold."""
        with self._lock:
            return sum(len(tokens) for tokens in self._batches.values())

    def stop(self) -> None:
        """Stop the thread (the leases in flight run out on their own)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def extend_now(self, conn: Any) -> None:
        """Extend every lease in flight once, on ``conn``."""
        # The batches are read under _busy: read before it, a batch acknowledged meanwhile
        # was extended too, found no longer held, and counted lost (seen in CI).
        with self._busy:
            with self._lock:
                tokens = [t for batch in self._batches.values() for t in batch]
            if not tokens:
                return
            front: ExecutorFront[Message] = ExecutorFront(self.core(), PsycopgExecutor(conn))
            kept = front.extend(tokens, lease=self.lease)
        self.extended += len(kept)
        if len(kept) < len(tokens):
            self.lost += len(tokens) - len(kept)
            log.warning(
                "dbqueue stream: %d of %d leased items were no longer held when their leases "
                "were extended (given back by a rescue: delivered again); raise leaseSeconds",
                len(tokens) - len(kept),
                len(tokens),
            )

    def _run(self) -> None:
        conn = None
        while not self._stop.wait(self.interval):
            try:
                if conn is None or conn.closed:
                    conn = connect(self.info)
                self.extend_now(conn)
            except Exception:  # the database away for a moment: try again at the next beat
                log.warning("dbqueue stream: extending leases failed", exc_info=True)
                if conn is not None:
                    conn.close()
                conn = None
        if conn is not None:
            conn.close()
