"""docs/howto/deploy.md's PgBouncer section, through a real PgBouncer (Debian's: ``make
pgbouncer``) started from the page's configuration on a port of its own: orders placed
through its transaction pool, a worker through its session pool woken by notifications, a
LISTEN through the transaction pool that hears nothing, and a worker through the transaction
pool that still drains the queue (by polling)."""

from __future__ import annotations

import configparser
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from bench.loadtest.shop import WORKER, connections, free_port
from tests.example.deploy_guide import (
    PGBOUNCER,
    Machine,
    block,
    place_order,
    running,
    scalar,
    wait_until_serving,
)
from tests.processes import wait_for

pytestmark = [
    pytest.mark.postgresql,
    pytest.mark.django,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(PGBOUNCER).exists(), reason="make pgbouncer installs it"),
]


def pgbouncer_ini(dsn: str, port: int, folder: Path) -> Path:
    """The page's pgbouncer.ini on this machine: its databases on the test's server, its own
    port, log and pid files; authentication as the test server's (trust, its user)."""
    info = conninfo_to_dict(dsn)
    page = configparser.ConfigParser(interpolation=None)
    page.optionxform = str  # type: ignore[assignment,method-assign]
    page.read_string(block("pgbouncer-ini").code)
    databases = page["databases"]
    for alias, target in databases.items():
        assert "host=127.0.0.1 port=5432 dbname=shop" in target, alias
        databases[alias] = target.replace(
            "host=127.0.0.1 port=5432 dbname=shop",
            f"host={info.get('host', '127.0.0.1')} port={info.get('port', 5432)} "
            f"dbname={info['dbname']}",
        )
    settings = page["pgbouncer"]
    assert (settings["listen_port"], settings["pool_mode"]) == ("6432", "transaction")
    user = str(info.get("user") or os.environ.get("USER", "postgres"))
    (folder / "userlist.txt").write_text(f'"{user}" ""\n')
    settings.update(
        listen_port=str(port),
        auth_type="trust",
        auth_file=str(folder / "userlist.txt"),
        logfile=str(folder / "pgbouncer.log"),
        pidfile=str(folder / "pgbouncer.pid"),
        unix_socket_dir="",
    )
    if os.geteuid() == 0:  # PgBouncer refuses to run as root
        settings["user"] = "postgres"
        folder.chmod(0o777)
        reach_socket(info.get("host", ""))
    path = folder / "pgbouncer.ini"
    with path.open("w") as f:
        page.write(f)
    return path


def reach_socket(host: str) -> None:
    """Let the user PgBouncer switches to reach a server listening on a socket only: the
    embedded test server's socket lies in its data directory, private to root (0700).
    Traversal is enough (the socket itself is 0777); PostgreSQL checks its data directory's
    mode only when it starts."""
    if host.startswith("/"):
        socket_dir = Path(host)
        socket_dir.chmod(socket_dir.stat().st_mode | 0o011)


@pytest.fixture
def bouncer(machine: Machine) -> Iterator[Machine]:
    """The page's ``pgbouncer`` command running the page's file; the machine, knowing its port.
    Its folder is one the user PgBouncer switches to can reach (pytest's are private)."""
    folder = Path(tempfile.mkdtemp(prefix="dbqueue-pgbouncer-"))
    try:
        yield from _bouncer(machine, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _bouncer(machine: Machine, folder: Path) -> Iterator[Machine]:
    machine.pgbouncer_port = free_port()
    ini = pgbouncer_ini(machine.dsn, machine.pgbouncer_port, folder)
    (command, *_) = machine.page_commands("pgbouncer")
    command.args[-1] = str(ini)  # /etc/pgbouncer/pgbouncer.ini
    with running(command, folder / "stdout.log") as proc:
        url = f"postgresql://127.0.0.1:{machine.pgbouncer_port}/shop"
        user = conninfo_to_dict(machine.dsn).get("user")

        def accepts() -> bool:
            try:
                psycopg.connect(url, user=user, connect_timeout=2).close()
                return True
            except psycopg.OperationalError:
                assert proc.poll() is None, (folder / "stdout.log").read_text()
                return False

        wait_for(accepts, "PgBouncer accepts connections", folder / "stdout.log")
        yield machine


def through(machine: Machine, alias: str) -> str:
    """A DSN to ``alias`` (a database of the page's pgbouncer.ini) through PgBouncer."""
    user = conninfo_to_dict(machine.dsn).get("user", "")
    return f"host=127.0.0.1 port={machine.pgbouncer_port} dbname={alias} user={user}"


def test_web_through_the_transaction_pool_worker_through_the_session_pool(
    bouncer: Machine, tmp_path: Path
) -> None:
    _, web, worker = bouncer.page_commands("pgbouncer")
    assert web.env["DATABASE_POOLING"] == "transaction"
    with running(web, tmp_path / "web.log") as web_proc, running(worker, tmp_path / "w.log"):
        wait_until_serving(bouncer.port, web_proc, tmp_path / "web.log")
        orders = [place_order(bouncer.port) for _ in range(30)]
        assert {status for status, _ in orders} == {201}
        ids = [order for _, order in orders]
        sent = "SELECT count(*) FROM shop_sentconfirmation WHERE order_id = ANY(%s)"
        wait_for(lambda: scalar(bouncer.dsn, sent, [ids]) == 30, "30 e-mails", tmp_path / "w.log")
        sales = "SELECT count(*) FROM shop_sale WHERE order_id = ANY(%s)"
        wait_for(lambda: scalar(bouncer.dsn, sales, [ids]) == 30, "30 sales", tmp_path / "w.log")
        # Through the pool, the web's connections are PgBouncer's few server connections.
        assert connections(bouncer.dsn)["shop-web"] <= 20


def test_listen_works_through_the_session_pool_only(bouncer: Machine) -> None:
    with (
        psycopg.connect(through(bouncer, "shop"), autocommit=True) as pooled,
        psycopg.connect(through(bouncer, "shop_session"), autocommit=True) as session,
        psycopg.connect(through(bouncer, "shop"), autocommit=True) as pusher,
    ):
        pooled.execute("LISTEN deploy_test")
        session.execute("LISTEN deploy_test")
        pusher.execute("NOTIFY deploy_test, 'order placed'")
        heard = [n.payload for n in session.notifies(timeout=5, stop_after=1)]
        assert heard == ["order placed"]
        # The pooled LISTEN ran on a server connection lent for that one statement.
        assert list(pooled.notifies(timeout=1)) == []


def test_a_worker_through_the_transaction_pool_still_drains_by_polling(
    bouncer: Machine, tmp_path: Path
) -> None:
    _, web, worker = bouncer.page_commands("pgbouncer")
    worker.env["DATABASE_URL"] = web.env["DATABASE_URL"].replace("shop-web", WORKER)
    worker.env["DATABASE_POOLING"] = "transaction"
    log = tmp_path / "w.log"
    with running(web, tmp_path / "web.log") as web_proc, running(worker, log):
        wait_until_serving(bouncer.port, web_proc, tmp_path / "web.log")
        ids = [place_order(bouncer.port)[1] for _ in range(5)]
        sent = "SELECT count(*) FROM shop_sentconfirmation WHERE order_id = ANY(%s)"
        wait_for(lambda: scalar(bouncer.dsn, sent, [ids]) == 5, "5 e-mails", log)
