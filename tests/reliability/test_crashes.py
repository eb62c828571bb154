"""Real worker processes (``manage.py runqueueworker``) killed, signalled, and cut off by a
PostgreSQL restart: every item is handled at least once, duplicates stay within what killed
workers held, nothing stays leased, and a SIGTERM finishes what was started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from dbqueue import Field, FieldKind, QueueSpec, SplitQueue, get_dialect
from dbqueue.drivers.psycopg import PsycopgExecutor
from tests.pg import server_dsn, worker_id

pytestmark = [pytest.mark.postgresql, pytest.mark.django, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
#: The crash app's queue, seen from the core (the tables Django's migration created).
SPEC = QueueSpec("crashapp_crashjob", (Field("n", FieldKind.INTEGER),))
BATCH = 100
PATIENCE = 180.0


class Site:
    """A database with the crash app migrated, and worker processes running against it."""

    def __init__(self, dsn: str, tmp: Path) -> None:
        self.dsn = dsn
        self.tmp = tmp
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.reliability.settings",
            "DBQUEUE_CRASH_DSN": dsn,
            "PYTHONPATH": str(ROOT),
        }
        self.manage("migrate", "--verbosity=0")
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.queue = SplitQueue(SPEC, get_dialect("postgresql"))
        self.procs: list[subprocess.Popen[bytes]] = []

    def manage(self, *args: str) -> None:
        subprocess.run(
            [sys.executable, "-m", "django", *args], env=self.env, cwd=ROOT, check=True,
            timeout=120,
        )  # fmt: skip

    def push(self, count: int) -> None:
        ex = PsycopgExecutor(self.conn)
        self.queue.push_many(ex, [{"n": i} for i in range(count)])

    def start(self, *args: str, sleep: float | None = None) -> subprocess.Popen[bytes]:
        env = dict(self.env)
        if sleep is not None:
            env["DBQUEUE_CRASH_SLEEP"] = str(sleep)
        log = (self.tmp / f"worker-{len(self.procs)}.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "django", "runqueueworker", f"--batch-size={BATCH}",
             "--log-level=WARNING", *args],
            env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.procs.append(proc)
        return proc

    def count(self, query: str) -> int:
        row = self.conn.execute(query).fetchone()  # type: ignore[arg-type]
        assert row is not None
        return int(row[0])

    def handled(self) -> tuple[int, int]:
        """(handlings, distinct items handled)."""
        row = self.conn.execute(
            "SELECT count(*), count(DISTINCT item_id) FROM crashapp_handled"
        ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    def wait_for(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + PATIENCE
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting until {what}; logs: {self.logs()}")
            time.sleep(0.05)

    def wait_until_leased(self, count: int) -> None:
        """Wait until a worker holds ``count`` items (a batch in hand)."""
        query = "SELECT count(*) FROM crashapp_crashjob_meta WHERE state = 1"
        self.wait_for(lambda: self.count(query) == count, f"a worker holds {count} items")

    def stop_all(self) -> list[int]:
        """SIGTERM every live worker; their exit codes."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        return [proc.wait(60) for proc in self.procs if proc.returncode != -signal.SIGKILL]

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-2000:] for p in self.tmp.glob("*.log"))

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.conn.close()


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    """The crash app in a database of its own on the shared test server."""
    base = server_dsn()
    name = f"dbqueue_crash_{worker_id()}_{os.getpid()}"
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    result = Site(psycopg.conninfo.make_conninfo(base, dbname=name), tmp_path)
    yield result
    result.close()
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def assert_settled(site: Site) -> None:
    """Nothing left in the queue: not ready, not leased (after the lease time, at the latest)."""
    site.wait_for(
        lambda: site.count("SELECT count(*) FROM crashapp_crashjob_meta") == 0,
        "the queue is empty",
    )


def test_kill_9_mid_batch_loses_nothing(site: Site) -> None:
    total = 20_000
    site.push(total)
    victim = site.start()
    site.start()
    kills = 0
    for _ in range(3):
        # Kill once the victim is holding a batch: it has handled something, and has a lease.
        goal = site.handled()[0] + BATCH
        site.wait_for(lambda goal=goal: site.handled()[0] > goal, "the workers make progress")
        victim.kill()
        victim.wait(30)
        kills += 1
        victim = site.start()
    site.wait_for(lambda: site.handled()[1] == total, f"all {total} items are handled")
    assert_settled(site)
    handlings, distinct = site.handled()
    duplicates = handlings - distinct
    print(f"kill -9 x{kills}: {total} items, {handlings} handlings, {duplicates} duplicates")
    assert distinct == total
    assert duplicates <= kills * BATCH  # at most what the killed workers held
    assert site.stop_all() == [0, 0]  # the two live workers exit cleanly on SIGTERM


def test_sigterm_finishes_the_batch_a_batch_handler_started(site: Site) -> None:
    # The crash app's handler takes its batch whole: started, it is finished (a handler of
    # single items finishes only the item it started: tests/core/test_worker.py).
    site.push(50)
    worker = site.start("--batch-size=10", sleep=1.0)
    site.wait_until_leased(10)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    assert site.handled() == (10, 10)  # the batch in hand was finished...
    states = site.conn.execute(
        "SELECT state, count(*) FROM crashapp_crashjob_meta GROUP BY state"
    ).fetchall()
    assert states == [(0, 40)]  # ...and acked; no other batch was taken


def test_a_second_signal_exits_at_once(site: Site) -> None:
    site.push(10)
    worker = site.start("--batch-size=10", sleep=60.0)
    site.wait_until_leased(10)
    worker.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(10) == 128 + signal.SIGTERM
    assert site.handled() == (0, 0)  # its leases bring the items back (see the kill test)


@pytest.fixture
def owned_server(tmp_path: Path) -> Iterator[tuple[str, Callable[[], None]]]:
    """A PostgreSQL server of this test's own (pgserver), and a function that restarts it."""
    pgserver: Any = pytest.importorskip("pgserver", reason="the embedded extra provides it")
    from pgserver._commands import pg_ctl

    datadir = Path(tempfile.mkdtemp(prefix="dbqueue-restart-"))
    server = pgserver.get_server(datadir, cleanup_mode="delete")

    def restart() -> None:
        pg_ctl(["-w", "-m", "fast", "restart"], pgdata=datadir, user=server.system_user)

    yield str(server.get_uri()), restart
    # pgserver stops the postmaster it started; the restarted one is stopped here.
    pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=datadir, user=server.system_user)


def test_workers_reconnect_after_a_postgresql_restart(
    owned_server: tuple[str, Callable[[], None]], tmp_path: Path
) -> None:
    dsn, restart = owned_server
    site = Site(dsn, tmp_path)
    try:
        total = 5_000
        site.push(total)
        site.start(sleep=0.05)
        site.start(sleep=0.05)
        site.wait_for(lambda: site.handled()[0] > 2 * BATCH, "the workers make progress")
        site.conn.close()
        restart()
        site.conn = psycopg.connect(dsn, autocommit=True)
        site.wait_for(lambda: site.handled()[1] == total, f"all {total} items are handled")
        assert_settled(site)
        handlings, distinct = site.handled()
        print(f"restart: {total} items, {handlings} handlings")
        assert distinct == total
        assert site.stop_all() == [0, 0]
    finally:
        site.close()
