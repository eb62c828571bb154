"""docs/howto/deploy.md as the tests read it: its blocks by name, and its commands and files
turned into this machine's (the test's database and ports, this checkout, this venv).

Each block of the page is preceded by ``<!-- test: deploy NAME -->`` (a test runs it) or
``<!-- test: not-here REASON -->`` (this machine cannot: REASON says what is checked instead).
The page's placeholders, and what the tests put in their place:

* ``postgresql://shop@127.0.0.1:5432/shop``: the test's database (its connections named after
  the process's role); the same URL on port 6432: the test's PgBouncer, whose databases keep
  the page's names (``shop``, ``shop_session``);
* port 8000: a free port; ``/srv/shop``: ``example_project``; ``/srv/shop/.venv/bin/X``,
  ``gunicorn``, ``uvicorn``, ``python``: this venv's.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import psycopg

from bench.loadtest.shop import WEB, WORKER, end, shop_url
from tests.docs.tutorial import DOCS, Block, blocks, commands
from tests.processes import PATIENCE, ROOT

PAGE = DOCS / "howto" / "deploy.md"
EXAMPLE = ROOT / "example_project"
VENV_BIN = Path(sys.executable).parent
SRV = "/srv/shop"
PGBOUNCER = "/usr/sbin/pgbouncer"
#: The page's own database URL: Machine puts the test's database in its place.
PAGE_URL = "postgresql://shop@127.0.0.1:5432/shop"
PAGE_ENV = {"DATABASE_URL": PAGE_URL}


def page_blocks() -> dict[str, Block]:
    """The page's blocks that a test runs, by name (``<!-- test: deploy NAME -->``)."""
    named = {}
    for block in blocks(PAGE):
        for directive in block.directives:
            kind, _, name = directive.partition(" ")
            if kind == "deploy":
                named[name] = block
    return named


def block(name: str) -> Block:
    return page_blocks()[name]


@dataclass
class Machine:
    """This machine's stand-ins for the page's placeholders."""

    dsn: str
    port: int
    pgbouncer_port: int | None = None
    #: Environment every process gets besides the page's.
    extra_env: dict[str, str] = field(default_factory=dict)

    def database_url(self, url: str, role: str) -> str:
        parts = urlsplit(url)
        if parts.port == 5432:
            return shop_url(self.dsn, role)
        if parts.port == 6432:
            assert self.pgbouncer_port is not None, "this test runs no PgBouncer"
            return shop_url(
                self.dsn, role, host="127.0.0.1", port=str(self.pgbouncer_port),
                dbname=parts.path.lstrip("/"),
            )  # fmt: skip
        raise AssertionError(f"the page's database URL {url!r} is on no known port")

    def program(self, name: str) -> list[str]:
        name = name.replace(f"{SRV}/.venv/bin/", "")
        match name:
            case "gunicorn" | "uvicorn":
                return [sys.executable, "-m", name]
            case "python":
                return [sys.executable]
            case "pgbouncer":
                return [PGBOUNCER]
        raise AssertionError(f"the test does not know how to run {name!r}")

    def argument(self, arg: str) -> str:
        if arg == "8000":
            return str(self.port)
        for host in ("127.0.0.1", "0.0.0.0"):
            if arg == f"{host}:8000":
                return f"127.0.0.1:{self.port}"
        return arg.replace(SRV, str(EXAMPLE))

    def command(self, argv: list[str], env: dict[str, str] | None = None) -> Command:
        """A command line of the page (``VAR=value ... program args``) or a unit's or a
        service's (``env`` given apart) as this machine runs it."""
        given = dict(env or {})
        while argv and "=" in argv[0] and not argv[0].startswith("-"):
            key, _, value = argv[0].partition("=")
            given[key] = value
            argv = argv[1:]
        role = WORKER if "runqueueworker" in argv else WEB
        environ = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
        environ.pop("DATABASE_URL", None)
        environ.update(self.extra_env)
        environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(EXAMPLE)])
        for key, value in given.items():
            environ[key] = self.database_url(value, role) if key == "DATABASE_URL" else value
        args = [*self.program(argv[0]), *(self.argument(a) for a in argv[1:])]
        return Command(args, environ, role)

    def page_commands(self, name: str) -> list[Command]:
        return [self.command(argv) for argv in commands(block(name).code)]


@dataclass
class Command:
    args: list[str]
    env: dict[str, str]
    role: str

    def __str__(self) -> str:
        return shlex.join(self.args)


@contextmanager
def running(command: Command, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``command`` in the background in the example's directory (output in ``log``), stopped
    with SIGTERM (then SIGKILL) at the end if it still runs."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            command.args, cwd=EXAMPLE, env=command.env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        yield proc
    finally:
        end(proc)


def run_to_end(command: Command, timeout: float = 300) -> None:
    """Run ``command`` in the example's directory; it must exit 0."""
    done = subprocess.run(
        command.args, cwd=EXAMPLE, env=command.env, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{command} exited {done.returncode}:\n{done.stderr}"


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> tuple[int, float]:
    """Send ``sig`` and wait (PATIENCE at most); the exit status and the seconds it took."""
    started = time.monotonic()
    proc.send_signal(sig)
    status = proc.wait(PATIENCE)
    return status, time.monotonic() - started


def request(port: int, path: str, data: dict[str, str] | None = None) -> tuple[int, bytes]:
    """A GET (or a POST of ``data``) to the site; its status and body (any status)."""
    body = urlencode(data).encode() if data is not None else None
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", body, timeout=30) as r:
            return int(r.status), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_until_serving(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + PATIENCE
    while True:
        try:
            if request(port, "/queue/")[0] == 200:
                return
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(
                f"the site did not come up (exit {proc.poll()}):\n{log.read_text()}"
            )
        time.sleep(0.1)


def place_order(port: int, total: str = "10.00") -> tuple[int, int | None]:
    """``POST /orders/``: the status, and the order's id on a 201."""
    status, body = request(port, "/orders/", {"email": "ann@example.com", "total": total})
    return status, (int(json.loads(body)["order"]) if status == 201 else None)


def scalar(dsn: str, query: str, params: list[object] | None = None) -> int:
    """The one integer ``query`` returns."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(query, params or []).fetchone()
    return int(row[0]) if row else 0
