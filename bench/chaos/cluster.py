"""A PostgreSQL cluster of the chaos run's own, which it may restart at will."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any


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

    def stop(self) -> None:
        self._pg_ctl("-w", "-m", "immediate", "stop")
