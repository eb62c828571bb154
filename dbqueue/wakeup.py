"""How an idle worker learns that there is work: a doorbell rung by LISTEN/NOTIFY on
PostgreSQL, and polling with back-off everywhere (the only way on SQLite, and the fallback
when notifications are lost: across reconnects, through transaction-pooling proxies, or after
a push's notification was coalesced away — see ``QueueOptions.notify_interval``).
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (the worker package imports this module)
    from dbqueue.worker.quiet import Throttle

log = logging.getLogger("dbqueue.worker")


@dataclass(frozen=True, slots=True)
class PollPolicy:
    """When an idle worker looks again.

    After an empty pop the wait starts at ``first`` seconds and doubles up to ``busy_max`` while
    the worker has had work within ``linger`` seconds (a pusher that just notified may be
    coalescing the next notifications). After that, with a connected listener, the worker sleeps
    until a notification or ``safety`` seconds; without one, it polls every ``busy_max``.
    """

    first: float = 0.005
    busy_max: float = 0.05
    linger: float = 1.0
    safety: float = 10.0

    def wait(self, empty_rounds: int, idle_for: float, listening: bool) -> float:
        """Seconds to wait after ``empty_rounds`` empty pops in a row."""
        if listening and idle_for >= self.linger:
            return self.safety
        return min(self.first * 2.0 ** min(empty_rounds - 1, 30), self.busy_max)


class Doorbell:
    """Idle worker threads wait here; a notification (or a stop) wakes all of them."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._rings = 0

    @property
    def rings(self) -> int:
        """How many times it has rung: pass it to :meth:`wait` to miss no ring."""
        return self._rings

    def ring(self) -> None:
        with self._cond:
            self._rings += 1
            self._cond.notify_all()

    def wait(self, seen: int, timeout: float) -> bool:
        """Wait until rung after ``seen`` rings, or ``timeout`` seconds; True if rung."""
        with self._cond:
            return self._cond.wait_for(lambda: self._rings != seen, timeout)


class Listener:
    """A thread that LISTENs on queue channels over its own PostgreSQL connection and rings
    the doorbell on every notification. It reconnects with back-off after losing the server,
    and rings on every (re)connection: notifications sent meanwhile were lost.

    ``connect`` returns a new psycopg connection (autocommit is set here), or None if the
    database cannot notify after all (then the listener ends and workers poll).

    It sleeps on its connection's socket and on a wake-up socket of its own, with no timeout:
    :meth:`stop` writes to the latter, so an idle worker exits at once on SIGTERM.

    A failure is logged at each retry, or through ``quiet`` (a worker's
    :class:`~dbqueue.worker.quiet.Throttle`) at most once in a while while it repeats.
    """

    def __init__(
        self,
        connect: Callable[[], Any],
        channels: Iterable[str],
        doorbell: Doorbell,
        *,
        retry_max: float = 5.0,
        quiet: Throttle | None = None,
    ) -> None:
        self._connect = connect
        self._quiet = quiet
        self.channels = sorted(set(channels))
        self.doorbell = doorbell
        self._retry_max = retry_max
        self._stop = threading.Event()
        self._connected = threading.Event()
        #: The wake-up socket's two ends (read, write), from start() until stop().
        self._wake: tuple[socket.socket, socket.socket] | None = None
        self._thread = threading.Thread(target=self._run, name="dbqueue-listener", daemon=True)

    @property
    def listening(self) -> bool:
        """Whether notifications can arrive right now."""
        return self._connected.is_set()

    def start(self) -> None:
        self._wake = socket.socketpair()
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """End the thread (at once: the wake-up socket interrupts its wait) and close its
        connection; wait up to ``timeout`` seconds for that."""
        self._stop.set()
        wake = self._wake
        if wake is None:  # never started
            return
        quietly(lambda: wake[1].send(b"\0"))
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self._wake = None
            for end in wake:
                end.close()

    def _run(self) -> None:
        delay = 0.1
        while not self._stop.is_set():
            try:
                self._listen()
                delay = 0.1
            except Exception as exc:  # the server went away, or refused us: retry
                self._connected.clear()
                self.doorbell.ring()  # idle workers fall back to polling meanwhile
                msg = "listener: %s; reconnecting in %.1f s"
                if self._quiet is None:
                    log.warning(msg, exc, delay)
                else:
                    self._quiet.failure("listener", exc, msg, exc, delay, logger=log)
                self._stop.wait(delay)
                delay = min(delay * 2, self._retry_max)

    def _listen(self) -> None:
        from psycopg import sql  # PostgreSQL only: psycopg is an extra

        conn = self._connect()
        if conn is None:
            self._stop.set()
            return
        try:
            conn.autocommit = True
            for channel in self.channels:
                # A channel is an identifier: quoted by psycopg's sql module, never formatted.
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            self._connected.set()
            self.doorbell.ring()
            self._wait_for_notifications(conn)
        finally:
            self._connected.clear()
            quietly(conn.close)

    def _wait_for_notifications(self, conn: Any) -> None:
        from psycopg import OperationalError

        assert self._wake is not None  # start() made it
        socket_fd = conn.fileno()
        with selectors.DefaultSelector() as selector:
            selector.register(socket_fd, selectors.EVENT_READ)
            selector.register(self._wake[0], selectors.EVENT_READ)
            while not self._stop.is_set():
                # Readable: a notification, the server closing the connection, or stop().
                ready = {key.fd for key, _ in selector.select()}
                # Read all that arrived, without waiting (and to the end: the generator holds the
                # connection's lock); a dead connection raises here, and the loop reconnects.
                if socket_fd in ready and list(conn.notifies(timeout=0)):
                    self.doorbell.ring()
                if conn.broken or conn.closed:
                    raise OperationalError("the listening connection was lost")


def quietly(action: Callable[[], object]) -> None:
    """Run a clean-up (closing a connection) that may fail because the connection is broken."""
    try:
        action()
    except Exception:
        log.debug("ignored while cleaning up", exc_info=True)
