"""Running the handlers, and settling what they did: ack what succeeded, fail what raised
(with its traceback; a fixed text when the database refuses that), count leases lost."""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

from dbqueue.error_text import storable_error
from dbqueue.errors import DBQueueError
from dbqueue.message import State
from dbqueue.outage import is_outage
from dbqueue.tracing import handle_span
from dbqueue.wakeup import quietly
from dbqueue.worker.consumer import Consumer, WorkerQueue
from dbqueue.worker.state import REFUSED_ERROR, InFlight, Retry, WorkerBase, log


class Handling(WorkerBase):
    """The handler and settling part of :class:`~dbqueue.worker.Worker`."""

    def _process(self, consumer: Consumer, items: Sequence[Any], retry: Retry) -> list[Any]:
        """Run the handler; fail what raised; return what succeeded (acked by the caller)."""
        start = time.monotonic()
        key = id(items)
        inflight = InFlight(consumer.queue, items)
        with self._lock:
            self._inflight[key] = inflight
        ok: list[Any] = []
        failed: list[Any] = []
        errors: list[str] = []
        durations: list[float] = []  # seconds per handler call, for the metrics
        table = getattr(consumer.queue, "table", consumer.queue.name)  # how spans name it
        try:
            # BaseException: a handler calling sys.exit() fails its item, not the thread.
            # A KeyboardInterrupt here is the handler's own (run() handles SIGINT in the main
            # thread): it fails the item too.
            if consumer.batch:
                inflight.started = len(items)
                with handle_span(table) as span:
                    span.ids([item.id for item in items])
                    try:
                        consumer.handle(list(items))
                        ok = list(items)
                    except BaseException as exc:
                        failed, errors = list(items), [traceback.format_exc()] * len(items)
                        span.failed(exc)
                durations.append(time.monotonic() - start)
            else:
                for index, item in enumerate(items):
                    if self._releasing.is_set():  # stopping: the rest go back unstarted
                        break
                    inflight.started = index + 1
                    called = time.monotonic()
                    with handle_span(table) as span:
                        span.ids([item.id])
                        try:
                            consumer.handle(item)
                            ok.append(item)
                        except BaseException as exc:
                            failed.append(item)
                            errors.append(traceback.format_exc())
                            span.failed(exc)
                    durations.append(time.monotonic() - called)
            handled = time.monotonic()
            self._release(consumer.queue, inflight.unstarted())
            states = self._settle(consumer.queue, [], failed, errors, retry) if failed else {}
        finally:
            with self._lock:
                del self._inflight[key]
        again, final = self._log_failures(consumer.queue, failed, errors, states)
        with self._lock:
            self.stats.handled += len(ok)
            self.stats.failed += final
            self.stats.retried += again
            self.stats.batches += 1
        self.activity.add(consumer.queue, len(ok), len(failed))
        self.tallies.handled(
            consumer.queue.name, ok=len(ok), retried=again, failed=final, durations=durations
        )
        log.debug(  # at INFO: the summary line every summary_every seconds
            "queue %s: %d item(s), %d ok, %d failed; handler %.1f ms, fail %.1f ms",
            consumer.queue.name,
            len(items),
            len(ok),
            len(failed),
            (handled - start) * 1000,
            (time.monotonic() - handled) * 1000,
        )
        return ok

    def _settle(
        self,
        queue: WorkerQueue,
        ok: list[Any],
        failed: list[Any],
        errors: list[str],
        retry: Retry,
    ) -> Mapping[int, State]:
        """Ack and fail, retrying through database errors; count the leases found lost.
        Returns the new states of the failed items (those whose lease was lost left out)."""
        acked: Sequence[int] | None = None
        states: Mapping[int, State] | None = None
        refused = 0  # items the database refused to settle (left to their leases)
        while True:
            if self._abandoned.is_set() and (acked is None or states is None):
                # The worker stopped waiting for the database: nothing more is tried.
                left, why = (failed, errors) if states is None else ([], [])
                self._leave(queue, ok if acked is None else [], left, why)
                return states or {}
            started = time.monotonic()
            try:
                if acked is None:
                    acked = queue.ack(ok) if ok else []
                if states is None:
                    states = queue.fail(failed, errors) if failed else {}
                break
            except Exception as exc:
                if is_outage(exc):
                    operation = "ack" if acked is None else "fail"
                    self._database_error(queue, exc, retry, operation, settling=True)
                    continue
                if isinstance(exc, DBQueueError):
                    raise
                # Retried, a statement the database refused fails the same way forever.
                if acked is None:
                    self._settle_refused(queue, "ack", ok, exc)
                    acked, refused = [], refused + len(ok)
                else:
                    outcome = self._fail_plainly(queue, failed, exc, retry)
                    if outcome is not None:
                        states, gave_up = outcome
                        refused += gave_up
        self._reached(queue, retry, started)
        self._count_lost(queue, len(ok) - len(acked) + len(failed) - len(states) - refused)
        return states

    def _leave(
        self, queue: WorkerQueue, ok: Sequence[Any], failed: Sequence[Any], errors: Sequence[str]
    ) -> None:
        """Say what a worker that stopped waiting for its database leaves unsettled (a failed
        attempt with its traceback, which is not stored): their leases bring the items back."""
        if ok:
            log.warning(
                "queue %s: %d handled item(s) not acked, the database is out of reach: their "
                "leases bring them back (ids %s)",
                queue.name,
                len(ok),
                ", ".join(str(getattr(i, "id", i)) for i in ok),
            )
        for item, error in zip(failed, errors, strict=True):
            log.warning(
                "queue %s: item %s failed (attempt %s/%d), not recorded: the database is out "
                "of reach, its lease brings it back\n%s",
                queue.name,
                getattr(item, "id", item),
                getattr(item, "attempts", "?"),
                queue.max_attempts,
                storable_error(error).rstrip(),
            )

    def _log_failures(
        self,
        queue: WorkerQueue,
        failed: Sequence[Any],
        errors: Sequence[str],
        states: Mapping[int, State],
    ) -> tuple[int, int]:
        """Log each failed attempt with its traceback: WARNING if it will be tried again,
        ERROR if it failed for good. Returns how many of each (an item whose lease was lost
        meanwhile is neither: :meth:`_count_lost` logged it)."""
        again = final = 0
        for item, error in zip(failed, errors, strict=True):
            state = states.get(item.id)
            if state is None:
                continue
            retried = state is State.READY
            again, final = again + retried, final + (not retried)
            log.log(
                logging.WARNING if retried else logging.ERROR,
                "queue %s: item %s failed (attempt %s/%d); %s\n%s",
                queue.name,
                item.id,
                item.attempts,
                queue.max_attempts,
                "it will be tried again after its back-off"
                if retried
                else "cancelled"
                if state is State.CANCELLED
                else "failed for good",
                storable_error(error).rstrip(),  # a log file takes no lone surrogate either
            )
        return again, final

    def _settle_refused(
        self, queue: WorkerQueue, operation: str, items: Sequence[Any], exc: BaseException
    ) -> None:
        with self._lock:
            self.stats.database_errors += 1
        log.error(
            "queue %s: the database refused to %s item(s) %s; left leased, they come back "
            "when their lease expires",
            queue.name,
            operation,
            ", ".join(str(getattr(i, "id", i)) for i in items),
            exc_info=exc,
        )
        quietly(queue.disconnect)

    def _fail_plainly(
        self, queue: WorkerQueue, items: Sequence[Any], exc: BaseException, retry: Retry
    ) -> tuple[Mapping[int, State], int] | None:
        """The database refused to record the failures (their error texts): record them with
        a fixed text instead, once; if that is refused too, leave them to their leases. The
        new states and how many items were left; None if an outage cut the fallback short
        (the caller tries again)."""
        with self._lock:
            self.stats.database_errors += 1
        log.error(
            "queue %s: the database refused the failure of item(s) %s; recorded with a fixed "
            "error text instead",
            queue.name,
            ", ".join(str(getattr(i, "id", i)) for i in items),
            exc_info=exc,
        )
        quietly(queue.disconnect)
        text = f"{REFUSED_ERROR} ({type(exc).__name__})"
        try:
            return queue.fail(items, [text] * len(items)), 0
        except Exception as again:
            if is_outage(again):
                self._database_error(queue, again, retry, "fail", settling=True)
                return None
            if isinstance(again, DBQueueError):
                raise
            self._settle_refused(queue, "fail", items, again)
            return {}, len(items)

    def _count_lost(self, queue: WorkerQueue, lost: int) -> None:
        if not lost:
            return
        with self._lock:
            self.stats.lost_leases += lost
        self.tallies.lost(queue.name, lost)
        log.warning(
            "queue %s: %d lease(s) had expired before the batch was settled; those items "
            "were or will be delivered again (raise the queue's lease?)",
            queue.name,
            lost,
        )
