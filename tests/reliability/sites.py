"""A database of a test's own on the shared test server, with the test app migrated into it,
and the Django processes of :mod:`tests.reliability.actors` running against it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg import sql

from tests.pg import server_dsn, worker_id
from tests.processes import PATIENCE, ROOT, wait_for


@contextmanager
def own_database(prefix: str, *, owner: str | None = None) -> Iterator[str]:
    """A new database named after ``prefix``, this xdist worker and process (owned by the role
    ``owner``, if given); its DSN, as the server's DSN's user. Dropped afterwards."""
    base = server_dsn()
    name = f"{prefix}_{worker_id()}_{os.getpid()}"
    create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if owner is not None:
        create = sql.SQL("{} OWNER {}").format(create, sql.Identifier(owner))
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        admin.execute(create)
    try:
        yield psycopg.conninfo.make_conninfo(base, dbname=name)
    finally:
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@contextmanager
def own_role(prefix: str, *settings: tuple[str, str]) -> Iterator[str]:
    """A new login role named after ``prefix``, this xdist worker and process, with the
    session defaults ``settings`` (``ALTER ROLE ... SET name = value``); its name. Dropped
    afterwards (drop the databases it owns first)."""
    name = f"{prefix}_{worker_id()}_{os.getpid()}"
    with psycopg.connect(server_dsn(), autocommit=True) as admin:
        admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
        for setting, value in settings:
            admin.execute(
                sql.SQL("ALTER ROLE {} SET {} = {}").format(
                    sql.Identifier(name), sql.Identifier(setting), sql.Literal(value)
                )
            )
    try:
        yield name
    finally:
        with psycopg.connect(server_dsn(), autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


class Actors:
    """The Django processes of :mod:`tests.reliability.actors` on the database of ``dsn``,
    each logging to ``<tmp>/<name>.log`` (its output in ``<name>.out``)."""

    def __init__(self, dsn: str, tmp: Path, **environ: str) -> None:
        self.tmp = tmp
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.reliability.actor_settings",
            "DBQUEUE_ACTOR_DSN": dsn,
            "PYTHONPATH": str(ROOT),
            **environ,
        }
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def migrate(self) -> None:
        """Create the test app's tables (as the DSN's user: they are its to vacuum)."""
        subprocess.run(
            [sys.executable, "-m", "django", "migrate", "--verbosity=0"],
            env=self.env, cwd=ROOT, check=True, timeout=PATIENCE,
        )  # fmt: skip

    def log(self, name: str) -> Path:
        return self.tmp / f"{name}.log"

    def lines(self, name: str) -> list[str]:
        """The complete lines of ``name``'s log so far."""
        path = self.log(name)
        if not path.exists():
            return []
        return path.read_text(encoding="utf-8").split("\n")[:-1]

    def start(self, name: str, role: str, *args: str, **environ: str) -> subprocess.Popen[bytes]:
        """Start ``name`` in ``role`` (``environ``: what its environment adds)."""
        with (self.tmp / f"{name}.out").open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.reliability.actors", role, str(self.log(name)),
                 *args],
                env={**self.env, **environ}, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.procs[name] = proc
        return proc

    def stop(self, name: str) -> None:
        """Ask ``name`` to stop (its stop file)."""
        (self.tmp / f"{name}.log.stop").touch()

    def wait(self, name: str, timeout: float = PATIENCE) -> None:
        """Wait for ``name`` to exit, and fail unless it exited with 0."""
        code = self.procs[name].wait(timeout)
        assert code == 0, f"{name} exited with {code}: {self.output(name)}"

    def wait_for_line(self, name: str, what: str, ok: Callable[[str], bool]) -> None:
        """Wait until a line of ``name``'s log satisfies ``ok``."""
        wait_for(lambda: any(ok(line) for line in self.lines(name)), what, self.log(name))

    def output(self, name: str) -> str:
        path = self.tmp / f"{name}.out"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def close(self) -> None:
        """Kill whatever still runs (a test that failed midway)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
