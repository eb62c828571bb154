"""A PostgreSQL cluster of the chaos run's own, which it may restart at will."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql


class Cluster:
    """An embedded server (pgserver) in a temporary directory, deleted afterwards."""

    def __init__(self) -> None:
        import pgserver  # the embedded extra

        self.datadir = Path(tempfile.mkdtemp(prefix="dbqueue-chaos-"))
        self._server: Any = pgserver.get_server(self.datadir, cleanup_mode="delete")  # type: ignore[attr-defined]
        self.dsn = str(self._server.get_uri())
        self.restarts = 0

    def _pg_ctl(self, *args: str) -> None:
        from pgserver._commands import pg_ctl  # type: ignore[attr-defined]

        pg_ctl(list(args), pgdata=self.datadir, user=self._server.system_user)

    def restart_immediate(self) -> None:
        """Crash-restart: ``pg_ctl restart -m immediate`` (no checkpoint; recovery replays
        the WAL). Every connection breaks."""
        self._pg_ctl("-w", "-m", "immediate", "restart")
        self.restarts += 1

    def default_isolation(self, level: str | None) -> None:
        """Make ``level`` ("repeatable read") the isolation level every new connection to the
        run's database starts with (``ALTER DATABASE ... SET default_transaction_isolation``),
        or with None the server's default again. Sessions already open keep theirs. Tried
        again for a while if the server is not up (a restart's recovery)."""
        setting = (
            sql.SQL("SET default_transaction_isolation = {}").format(sql.Literal(level))
            if level is not None
            else sql.SQL("RESET default_transaction_isolation")
        )
        with self._admin() as conn:
            name = sql.Identifier(conn.info.dbname)
            conn.execute(sql.SQL("ALTER DATABASE {} {}").format(name, setting))

    def end_sessions(self, *, sparing: str) -> int:
        """End every client session of the run's database but this one's and those of the
        application ``sparing`` (``pg_terminate_backend``): their clients reconnect, with the
        database's defaults of now. How many were ended."""
        with self._admin() as conn:
            row = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND backend_type = 'client backend' AND application_name <> %s",
                [sparing],
            ).fetchone()
        return int(row[0]) if row else 0

    def _admin(self) -> psycopg.Connection[Any]:
        deadline = time.monotonic() + 60
        while True:
            try:
                return psycopg.connect(self.dsn, autocommit=True, connect_timeout=2)
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def stop(self) -> None:
        self._pg_ctl("-w", "-m", "immediate", "stop")
