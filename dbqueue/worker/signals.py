"""SIGTERM and SIGINT: the first finishes what was started and releases the rest, a second
exits at once. During a database outage the first one ends the run at once: nothing could be
settled or released, so there is nothing to wait for. The one hard exit in dbqueue is here: a
second signal must end the process even with a handler stuck in a call that never returns."""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType
from typing import Any

from dbqueue.errors import WorkerGaveUp
from dbqueue.worker.state import WorkerBase, first_line, log


class Signals(WorkerBase):
    """The signal part of :class:`~dbqueue.worker.Worker`."""

    _signals: int

    def _install_signals(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        restore: dict[int, Any] = {}
        for signum in (signal.SIGTERM, signal.SIGINT):
            restore[signum] = signal.signal(signum, self._on_signal)
        return restore

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        name = signal.Signals(signum).name
        if self._signals == 1:
            outage = self._outages.longest()
            if outage is not None:
                # Finishing the items started would end in acks that cannot be sent, and the
                # wait could last as long as the outage: stop now, leaving the items in hand
                # to their leases. The run ends with WorkerGaveUp (the commands exit 1, not
                # 0): what it had taken is neither settled nor released, and whoever stopped
                # it should know that those items come back only when their leases expire.
                lasted, queue, exc = outage
                self._abandon(
                    WorkerGaveUp(
                        f"queue {queue.name}: {name} while the database is unreachable (for "
                        f"{lasted:.0f} s): exiting at once, the items in hand are left to "
                        f"their leases: {first_line(exc)}"
                    ),
                    exc,
                )
                return
            log.warning(
                "%s: finishing the items already started, releasing the rest, then exiting "
                "(again to force)",
                name,
            )
            self.stop(release_unstarted=True)
            return
        # The unstarted items go back at once; the leases bring back those being handled.
        log.warning("%s again: releasing the unstarted items and exiting at once", name)
        with self._lock:
            batches = list(self._inflight.values())
        for batch in batches:  # (the threads start no more items: the worker is stopping)
            self._release(batch.queue, batch.unstarted())
        os._exit(128 + signum)
