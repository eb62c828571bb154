"""A TCP proxy in front of the test PostgreSQL, to take the database away from a worker: it
forwards connections on a port of its own to the server, until :meth:`TcpProxy.kill` resets
every connection it carries and stops listening, so that a statement in flight fails and a
new connection is refused, as when the server's host goes away."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from types import TracebackType

from psycopg.conninfo import conninfo_to_dict, make_conninfo

#: Bytes read from one side before writing them to the other.
CHUNK = 65536


class TcpProxy:
    """Forwards ``127.0.0.1:port`` (a free port, chosen when started) to ``target``: a
    ``(host, port)`` pair, or the path of a Unix socket."""

    def __init__(self, target: tuple[str, int] | str) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._killed = False
        self._thread = threading.Thread(target=self._accept, name="test-proxy", daemon=True)
        self._thread.start()

    @classmethod
    def to_server(cls, host: str, port: int | str) -> TcpProxy:
        """A proxy to the PostgreSQL server at ``host`` (a name, an address, or a socket
        directory; empty: localhost) and ``port`` (empty: 5432)."""
        host, port = host or "127.0.0.1", int(port or 5432)
        return cls(f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port))

    @classmethod
    def to_dsn(cls, dsn: str) -> TcpProxy:
        """A proxy to the server of the libpq ``dsn``."""
        info = {k: str(v) for k, v in conninfo_to_dict(dsn).items()}
        return cls.to_server(info.get("host", ""), info.get("port", ""))

    def dsn(self, dsn: str) -> str:
        """``dsn`` (same database, user, options) reaching its server through this proxy."""
        return make_conninfo(dsn, host="127.0.0.1", port=str(self.port))

    def kill(self) -> None:
        """Stop listening (a new connection is refused) and reset every connection carried."""
        with self._lock:
            self._killed = True
            sockets, self._sockets = self._sockets, []
        with suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the thread accepting (Linux)
        self._listener.close()
        for sock in sockets:
            _reset(sock)
        self._thread.join(5)

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.kill()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # killed
                return
            try:
                upstream = self._connect()
            except OSError:
                _reset(client)
                continue
            with self._lock:
                if self._killed:
                    _reset(client)
                    _reset(upstream)
                    return
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()

    def _connect(self) -> socket.socket:
        if isinstance(self.target, str):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(self.target)
            return sock
        return socket.create_connection(self.target)


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy from ``source`` to ``sink`` until either closes; then close both."""
    try:
        with suppress(OSError):
            while data := source.recv(CHUNK):
                sink.sendall(data)
    finally:
        _reset(source)
        _reset(sink)


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` at once: a TCP connection with a reset, as a dead host's would end."""
    with suppress(OSError):
        if sock.family != socket.AF_UNIX:  # closed with a linger of 0 s: a reset
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RD)  # wakes the thread reading it
    sock.close()


@contextmanager
def proxied(dsn: str) -> Iterator[tuple[TcpProxy, str]]:
    """A proxy to ``dsn``'s server and the DSN that goes through it; killed at the end."""
    proxy = TcpProxy.to_dsn(dsn)
    try:
        yield proxy, proxy.dsn(dsn)
    finally:
        proxy.kill()
