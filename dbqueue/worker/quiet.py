"""Saying a repeating failure once in a while.

While its database is away, every part of a worker meets the same failure again and again: a
retry every few seconds per thread, a lease extension every second, a compaction check ten
times a second. Logged at each attempt, a ten-minute outage made 574,623 lines (185 MB). So a
worker logs a failure at most once every :data:`QUIET_FOR` seconds per *cause*, and the next
line of that cause says how many it left out: ``... (12 more since)``.

A cause is what failed and the kind of error (:func:`cause_of`): ``("queue orders: ack",
"psycopg.OperationalError")``. Not the error's text, which can differ at every attempt (a
process id, a port) while the failure is the same. A line carries its cause and the count it
reports as the record's ``dbqueue_cause`` and ``dbqueue_left_out`` attributes, for a log
handler that wants them. One :class:`Throttle` per worker (``Worker.quiet``) serves all its
threads; :meth:`Throttle.failure` logs a failure by its cause::

    self.quiet.failure(
        f"queue {queue.name}: compaction", exc, "queue %s: compaction failed (%s)", queue.name, exc
    )

and :meth:`Throttle.log` (``warning``, ``error``, ``debug``) a line by a cause of the caller's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

from dbqueue.outage import sqlstate

#: Seconds a cause stays quiet after it was logged (a worker's ``quiet_for``).
QUIET_FOR = 30.0
#: Causes remembered at most; past that, those quiet long enough without a repeat are dropped.
MAX_CAUSES = 1000

log = logging.getLogger("dbqueue.worker")


def cause_of(what: str, exc: BaseException) -> tuple[str, str]:
    """The cause of a failure: ``what`` failed (``"queue orders: ack"``), and the kind of
    ``exc``: the class of the driver's error it wraps (or its own), with its SQLSTATE for a
    database error. A deadlock and a refused connection are two causes; a connection lost
    during a statement and refused at the next attempt are one, whether or not a front
    wrapped the error (QueueUnavailable, Django's and SQLAlchemy's own classes)."""
    inner = exc
    for _ in range(8):  # the driver's error: SQLAlchemy keeps it as orig, the others chain it
        orig = getattr(inner, "orig", None)
        wrapped = orig if isinstance(orig, BaseException) else inner.__cause__
        if wrapped is None or wrapped is inner:
            break
        inner = wrapped
    kind = f"{type(inner).__module__}.{type(inner).__qualname__}"
    state = sqlstate(exc)
    return (what, f"{kind} {state}" if state else kind)


class Throttle:
    """Logs a line per cause at most once every ``every`` seconds (on ``clock``, monotonic),
    counting those it leaves out; the next line of the cause ends with ``(N more since)``.
    Thread-safe: the threads of a worker share one."""

    def __init__(
        self,
        every: float = QUIET_FOR,
        *,
        logger: logging.Logger = log,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(every, bool) or not isinstance(every, int | float) or not every >= 0:
            raise ValueError(f"every must be seconds, 0 or more, got {every!r}")
        self.every = float(every)
        self.logger = logger
        self._clock = clock
        self._lock = threading.Lock()
        #: cause -> [when last logged, lines left out since]
        self._causes: dict[Hashable, list[float]] = {}

    def log(
        self,
        cause: Hashable,
        level: int,
        msg: str,
        *args: object,
        exc_info: Any = None,
        logger: logging.Logger | None = None,
    ) -> bool:
        """Log ``msg % args`` at ``level`` on ``logger`` (the throttle's own unless given),
        unless ``cause`` was logged less than :attr:`every` seconds ago: then only count it.
        Whether it was logged."""
        return self._emit(cause, level, msg, args, exc_info, logger)

    def failure(
        self,
        what: str,
        exc: BaseException,
        msg: str,
        *args: object,
        level: int = logging.WARNING,
        exc_info: Any = None,
        logger: logging.Logger | None = None,
    ) -> bool:
        """Log that ``what`` failed with ``exc``, as :meth:`log` does, the cause being
        :func:`cause_of` ``(what, exc)``; at WARNING unless ``level`` says otherwise."""
        return self._emit(cause_of(what, exc), level, msg, args, exc_info, logger)

    def debug(self, cause: Hashable, msg: str, *args: object, **kwargs: Any) -> bool:
        return self._emit(cause, logging.DEBUG, msg, args, **kwargs)

    def warning(self, cause: Hashable, msg: str, *args: object, **kwargs: Any) -> bool:
        return self._emit(cause, logging.WARNING, msg, args, **kwargs)

    def error(self, cause: Hashable, msg: str, *args: object, **kwargs: Any) -> bool:
        return self._emit(cause, logging.ERROR, msg, args, **kwargs)

    def _emit(
        self,
        cause: Hashable,
        level: int,
        msg: str,
        args: tuple[object, ...],
        exc_info: Any = None,
        logger: logging.Logger | None = None,
    ) -> bool:
        now = self._clock()
        with self._lock:
            seen = self._causes.get(cause)
            if seen is not None and now - seen[0] < self.every:
                seen[1] += 1
                return False
            left_out = 0 if seen is None else int(seen[1])
            if seen is None and len(self._causes) >= MAX_CAUSES:
                self._forget(now)
            self._causes[cause] = [now, 0]
        if left_out:
            msg, args = f"{msg} (%d more since)", (*args, left_out)
        # stacklevel: the record names the line that called log(), warning()...
        (logger or self.logger).log(
            level,
            msg,
            *args,
            exc_info=exc_info,
            stacklevel=3,
            extra={"dbqueue_cause": cause, "dbqueue_left_out": left_out},
        )
        return True

    def _forget(self, now: float) -> None:
        """Drop the causes quiet for longer than :attr:`every` with nothing left out (called
        with the lock held): their next line would be logged anyway."""
        for cause in [c for c, (at, n) in self._causes.items() if now - at >= self.every and not n]:
            del self._causes[cause]
