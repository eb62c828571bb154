"""The example shop's processes for the load test, on a database of its own: ``manage.py
migrate``, gunicorn serving ``shopsite.wsgi``, ``manage.py runqueueworker``; and a sampler of
their connections in ``pg_stat_activity``, told apart by ``application_name``."""

from __future__ import annotations

import datetime as dt
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import psycopg
from psycopg.conninfo import conninfo_to_dict

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "example_project"
SETTINGS = "bench.loadtest.shop_settings"
WEB, WORKER = "shop-web", "shop-worker"
#: Seconds to wait for a process to come up or go away (a hang guard).
PATIENCE = 60.0


def shop_url(dsn: str, application_name: str, **override: str) -> str:
    """``DATABASE_URL`` for the database of ``dsn``, its connections named ``application_name``
    (every libpq parameter in the query string: the shop passes them to psycopg); ``override``
    replaces parameters (``host``, ``port``, ``dbname``)."""
    info = {k: str(v) for k, v in conninfo_to_dict(dsn).items()}
    info.update(application_name=application_name, **override)
    return f"postgresql:///?{urlencode(info)}"


#: Under pytest-xdist, worker gwN picks its ports among PORTS_PER_WORKER from
#: FIRST_PORT + N x PORTS_PER_WORKER: below the ephemeral range, where the kernel's bind(0)
#: could hand the port one worker picked to another worker's server before it bound it.
FIRST_PORT, PORTS_PER_WORKER = 21_000, 500


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, for a server about to be started on it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw") and worker[2:].isdigit():
        first = FIRST_PORT + int(worker[2:]) * PORTS_PER_WORKER
        for port in random.sample(range(first, first + PORTS_PER_WORKER), PORTS_PER_WORKER):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class ShopConfig:
    """How the shop runs: its database, gunicorn's workers and the connection settings."""

    dsn: str
    logs: Path
    web_workers: int = 4
    #: gunicorn's worker class, ``sync`` or ``gthread`` (with ``threads`` each).
    worker_class: str = "sync"
    threads: int = 1
    conn_max_age: int | None = 60
    health_checks: bool = True
    worker_concurrency: int = 2

    def environ(self, application_name: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
        return {
            **env,
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(EXAMPLE)]),
            "DJANGO_SETTINGS_MODULE": SETTINGS,
            "DATABASE_URL": shop_url(self.dsn, application_name),
            "DJANGO_CONN_MAX_AGE": "none" if self.conn_max_age is None else str(self.conn_max_age),
            "DJANGO_CONN_HEALTH_CHECKS": "1" if self.health_checks else "0",
            "LOADTEST_OUTBOX": str(self.logs / "outbox"),
        }


class Shop:
    """The shop's web and worker processes; their output goes to ``web.log`` and
    ``worker.log`` in the config's log folder."""

    def __init__(self, config: ShopConfig) -> None:
        self.config = config
        self.port = free_port()
        self.web: subprocess.Popen[bytes] | None = None
        self.worker: subprocess.Popen[bytes] | None = None
        #: The backends of a worker killed with SIGKILL, still there when it was reaped.
        self.orphans: frozenset[int] = frozenset()
        #: When the current worker was started, on the server's clock: the worker backends
        #: that started before are a killed worker's (see ConnectionSampler).
        self.worker_since: dt.datetime | None = None
        #: Told each new ``worker_since`` before the worker starts (the sampler's).
        self.on_worker_start: Callable[[dt.datetime], None] = lambda since: None
        self.web_log = config.logs / "web.log"
        self.worker_log = config.logs / "worker.log"
        (config.logs / "outbox").mkdir(parents=True, exist_ok=True)

    def migrate(self) -> None:
        done = subprocess.run(
            [sys.executable, "manage.py", "migrate", "--verbosity", "0"],
            cwd=EXAMPLE, env=self.config.environ(WORKER), capture_output=True, text=True,
            timeout=300, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"manage.py migrate failed:\n{done.stdout}{done.stderr}")

    def _start(self, args: list[str], role: str, log: Path) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            return subprocess.Popen(
                args, cwd=EXAMPLE, env=self.config.environ(role), stdout=out,
                stderr=subprocess.STDOUT,
            )  # fmt: skip

    def start_web(self) -> None:
        c = self.config
        self.web = self._start(
            [
                sys.executable, "-m", "gunicorn", "shopsite.wsgi",
                "--bind", f"127.0.0.1:{self.port}", "--workers", str(c.web_workers),
                "--worker-class", c.worker_class, "--threads", str(c.threads),
                "--graceful-timeout", "10",
            ],
            WEB, self.web_log,
        )  # fmt: skip
        deadline = time.monotonic() + PATIENCE
        while not self._answers():
            if self.web.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"gunicorn did not come up:\n{self.web_log.read_text()}")
            time.sleep(0.2)

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/queue/", timeout=5) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def start_worker(self) -> None:
        self.worker_since = server_now(self.config.dsn)
        self.on_worker_start(self.worker_since)
        self.worker = self._start(
            [
                sys.executable, "manage.py", "runqueueworker",
                "--concurrency", str(self.config.worker_concurrency),
            ],
            WORKER, self.worker_log,
        )  # fmt: skip
        deadline = time.monotonic() + PATIENCE
        # Up when its connections are (a thread's, the maintenance thread's, the listener's).
        while connections(self.config.dsn, self.worker_since).get(WORKER, 0) < 1:
            if self.worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the worker did not start:\n{self.worker_log.read_text()}")
            time.sleep(0.1)

    def stop_worker(self, sig: signal.Signals = signal.SIGTERM) -> int:
        """Send ``sig`` to the worker and wait for it to exit; its exit status."""
        assert self.worker is not None
        self.worker.send_signal(sig)
        status = self.worker.wait(PATIENCE)
        self.worker = None
        if sig == signal.SIGKILL:  # what is left of it now is orphaned (see ConnectionSampler)
            self.orphans = self.orphans | backends(self.config.dsn, WORKER)
        return status

    def stop(self) -> None:
        """Stop everything still running (see :func:`end`)."""
        for proc in (self.worker, self.web):
            if proc is not None:
                end(proc)
        self.worker = self.web = None


def end(proc: subprocess.Popen[bytes]) -> None:
    """Stop ``proc`` if it still runs: SIGTERM, then SIGKILL after PATIENCE."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(PATIENCE)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def server_now(dsn: str) -> dt.datetime:
    """The database server's clock now (``pg_stat_activity.backend_start`` is on it)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    assert isinstance(row[0], dt.datetime)
    return row[0]


#: The worker backends started before the current worker (a killed worker's), by its start.
_ORPHANED = "application_name = %(worker)s AND backend_start < %(since)s"
#: Connections only: a parallel query's workers show in pg_stat_activity under their leader's
#: application_name (the idle worker's look at a 96,000-slot ring runs with two of them).
_CLIENTS = "backend_type = 'client backend'"


def count_connections(
    conn: psycopg.Connection[tuple[object, ...]], worker_since: dt.datetime | None = None
) -> Counter[str]:
    """The other connections to ``conn``'s database now, by ``application_name``; with
    ``worker_since``, the worker backends that started before it left out."""
    rows = conn.execute(
        "SELECT application_name, count(*) FROM pg_stat_activity "
        f"WHERE datname = current_database() AND pid <> pg_backend_pid() AND {_CLIENTS} "
        f"AND NOT coalesce({_ORPHANED}, false) GROUP BY 1",
        {"worker": WORKER, "since": worker_since},
    ).fetchall()
    return Counter({str(name): int(str(n)) for name, n in rows})


def count_orphans(conn: psycopg.Connection[tuple[object, ...]], worker_since: dt.datetime) -> int:
    """The worker backends that started before ``worker_since`` (a killed worker's)."""
    row = conn.execute(
        f"SELECT count(*) FROM pg_stat_activity "
        f"WHERE datname = current_database() AND {_CLIENTS} AND {_ORPHANED}",
        {"worker": WORKER, "since": worker_since},
    ).fetchone()
    return int(str(row[0])) if row else 0


def connections(dsn: str, worker_since: dt.datetime | None = None) -> Counter[str]:
    """The connections to ``dsn``'s database now, by ``application_name`` (see
    :func:`count_connections`)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return count_connections(conn, worker_since)


def backends(dsn: str, application_name: str) -> frozenset[int]:
    """The server pids of the connections named ``application_name`` now."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = %s",
            [application_name],
        ).fetchall()
    return frozenset(int(str(pid)) for (pid,) in rows)


def terminate(dsn: str, application_name: str) -> int:
    """``pg_terminate_backend`` on every connection named ``application_name``; how many."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = %s",
            [application_name],
        ).fetchall()
    return sum(1 for (ok,) in rows if ok)


class ConnectionSampler:
    """Samples :func:`connections` every ``every`` seconds in a thread; keeps the most seen,
    per ``application_name`` and in all.

    A process killed with SIGKILL leaves its backends behind until each next notices its client
    gone (at its next read or write; an idle one can wait a while), and a restarted process opens
    its own meanwhile: counted together, they would charge the new process with the dead one's
    connections. So the worker backends that started before the current worker
    (:meth:`worker_started`) are counted apart, in ``most_orphans``: told apart by their start
    on the server's clock, even one the killed worker was still opening when it died."""

    def __init__(self, dsn: str, every: float = 0.25) -> None:
        self.dsn, self.every = dsn, every
        self.most: Counter[str] = Counter()
        self.most_total = 0
        #: The most orphaned backends (a killed worker's) seen at once.
        self.most_orphans = 0
        self.worker_since: dt.datetime | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling (a sampler never started: nothing to do)."""
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join()

    def worker_started(self, since: dt.datetime) -> None:
        """A worker starts now (``since``, on the server's clock): the worker backends older
        than that are orphans from now on."""
        self.worker_since = since

    def _run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True, application_name="loadtest") as conn:
            while not self._stop.wait(self.every):
                since = self.worker_since
                now = count_connections(conn, since)
                for name, n in now.items():
                    self.most[name] = max(self.most[name], n)
                self.most_total = max(self.most_total, sum(now.values()))
                if since is not None:
                    self.most_orphans = max(self.most_orphans, count_orphans(conn, since))
