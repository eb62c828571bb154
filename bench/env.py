"""The one PostgreSQL every system runs on, and what the report records about it."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

#: Settings recorded in the report (the server's own values, whatever they are).
RECORDED_SETTINGS = (
    "server_version", "shared_buffers", "synchronous_commit", "fsync", "wal_level",
    "max_connections", "checkpoint_timeout", "max_wal_size", "autovacuum", "work_mem",
    "effective_io_concurrency", "jit",
)  # fmt: skip


@dataclass
class BenchEnv:
    """Where the benchmark runs: a server, its tools, and the run's options."""

    admin_dsn: str
    pg_bin: Path
    quick: bool = False
    sync_commit: bool = True
    #: Set by --scale: every size is the full one times this (the test suite's smoke run).
    scale: float | None = None
    #: Runs per figure for in-process workloads, and for those that start worker processes
    #: (--quick: 1, since process start-up would dominate a 3-minute run).
    repeat: int = 3
    process_repeat: int = 3
    longtx_seconds: float = 300.0
    #: --longtx-holder: what holds the xmin horizon in the long-transaction workload: a
    #: REPEATABLE READ snapshot on another table ("snapshot"), or a session idle in
    #: transaction after a write to another table ("xid"; bench.longtx).
    longtx_holder: str = "snapshot"
    #: The long-transaction workload also runs at the highest rate each system sustains
    #: (bench.longtx); --no-longtx-max leaves that out.
    longtx_max: bool = True
    #: --longtx-rates: the offered rates to run the long-transaction workload at instead (no
    #: 1,000 msg/s run, no probe): to measure one rate again, several times.
    longtx_rates: tuple[float, ...] = ()
    #: --bloat-messages: the bloat soak's N instead of the size's (e.g. 1,000,000 in a quick run).
    bloat_messages: int | None = None
    #: --pairs and --pair-seconds: the pairs workload's pair counts and duration per figure.
    pair_counts: tuple[int, ...] | None = None
    pair_seconds: float | None = None
    server: Any = None
    notes: list[str] = field(default_factory=list)
    #: Every database of the run is named ``<prefix>_<what>`` (DBQUEUE_BENCH_PREFIX), so runs
    #: sharing a server (the test suite's smoke run) never touch each other's databases.
    prefix: str = field(default_factory=lambda: os.environ.get("DBQUEUE_BENCH_PREFIX", "bench"))

    def database(self, suffix: str) -> str:
        """Create (afresh) the database ``<prefix>_<suffix>`` and return its DSN."""
        name = f"{self.prefix}_{suffix}"
        with psycopg.connect(self.admin_dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        dsn = psycopg.conninfo.make_conninfo(self.admin_dsn, dbname=name)
        if not self.sync_commit:
            self.set_synchronous_commit(dsn, False)
        return dsn

    def set_synchronous_commit(self, dsn: str, on: bool) -> None:
        """Make ``on`` the synchronous_commit of new connections to ``dsn``'s database."""
        name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
        value = sql.SQL("on" if on else "off")
        with psycopg.connect(self.admin_dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("ALTER DATABASE {} SET synchronous_commit = {}").format(
                    sql.Identifier(str(name)), value
                )
            )

    def drop(self, suffix: str) -> None:
        name = f"{self.prefix}_{suffix}"
        with psycopg.connect(self.admin_dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    def size(self, full: int, quick: int) -> int:
        """A workload size: the full run's, --quick's, or the full one times --scale."""
        if self.scale is not None:
            return max(1, int(full * self.scale))
        return quick if self.quick else full

    def describe(self) -> dict[str, Any]:
        with psycopg.connect(self.admin_dsn) as conn:
            settings = {
                name: conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()[0]  # type: ignore[index]
                for name in RECORDED_SETTINGS
            }
        settings["synchronous_commit (bench databases)"] = "on" if self.sync_commit else "off"
        return {
            "machine": {
                "platform": platform.platform(),
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "memory_gb": _memory_gb(),
            },
            "postgresql": settings,
            "server": "embedded (pgserver)" if self.server is not None else "DBQUEUE_BENCH_DSN",
        }


#: The environment variable that hands a child process (a worker, a chaos actor) its DSN: on
#: the command line, a password would show in ps.
DSN_VAR = "DBQUEUE_BENCH_DSN"


def child_environ(dsn: str) -> dict[str, str]:
    """The environment of a child process of the bench that connects to ``dsn``."""
    return {**os.environ, DSN_VAR: dsn}


def child_dsn() -> str:
    """The DSN a child process was given (see :func:`child_environ`)."""
    return os.environ[DSN_VAR]


def libpq_environ(dsn: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (the process environment) with ``dsn`` as libpq's PG* variables, so that a
    libpq program (pgbench) connects without the DSN on its command line."""
    names = {"host": "PGHOST", "port": "PGPORT", "user": "PGUSER", "password": "PGPASSWORD",
             "dbname": "PGDATABASE", "sslmode": "PGSSLMODE"}  # fmt: skip
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    out = dict(os.environ if base is None else base)
    out.update({names[k]: str(v) for k, v in info.items() if k in names and v is not None})
    return out


def _memory_gb() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
        return round(kb / 1024 / 1024, 1)
    except (OSError, ValueError, IndexError):
        return None


def start(quick: bool, sync_commit: bool, scale: float | None) -> BenchEnv:
    """The server named by ``DBQUEUE_BENCH_DSN``, else an embedded PostgreSQL 16 of our own."""
    dsn = os.environ.get("DBQUEUE_BENCH_DSN")
    if dsn:
        pg_bin = Path(os.environ.get("DBQUEUE_PG_BIN") or _pg_bin_from_path())
        return BenchEnv(dsn, pg_bin, quick, sync_commit, scale)
    import pgserver

    datadir = Path(tempfile.mkdtemp(prefix="dbqueue-bench-"))
    server = pgserver.get_server(datadir, cleanup_mode="delete")  # type: ignore[attr-defined]
    pg_bin = Path(pgserver.__file__).parent / "pginstall" / "bin"
    return BenchEnv(str(server.get_uri()), pg_bin, quick, sync_commit, scale, server=server)


def _pg_bin_from_path() -> str:
    """Where pgbench is: on PATH, in pg_config's bindir, or in the embedded server's wheel."""
    pgbench = shutil.which("pgbench")
    if pgbench:
        return str(Path(pgbench).parent)
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=False)
        if (Path(out.stdout.strip()) / "pgbench").exists():
            return out.stdout.strip()
    try:
        import pgserver
    except ImportError:
        raise RuntimeError("pgbench not found: set DBQUEUE_PG_BIN to its directory") from None
    return str(Path(pgserver.__file__).parent / "pginstall" / "bin")
