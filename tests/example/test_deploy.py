"""docs/howto/deploy.md, run: its gunicorn and uvicorn command lines serving the example shop,
CONN_MAX_AGE and CONN_HEALTH_CHECKS against cut connections, ATOMIC_REQUESTS with a push that
fails, the worker's N + 2 connections, its systemd units and compose file run as processes
and stopped within their grace periods, two workers at once (the PgBouncer part:
test_deploy_pgbouncer.py)."""

from __future__ import annotations

import configparser
import contextlib
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.loadtest.shop import WEB, WORKER, connections, terminate
from tests.docs.tutorial import blocks, commands
from tests.example.deploy_guide import (
    EXAMPLE,
    PAGE,
    PAGE_ENV,
    SRV,
    VENV_BIN,
    Command,
    Machine,
    block,
    page_blocks,
    place_order,
    run_to_end,
    running,
    scalar,
    stop,
    wait_until_serving,
)
from tests.processes import PATIENCE, wait_for

pytestmark = [pytest.mark.postgresql, pytest.mark.django, pytest.mark.slow]

#: Every block the tests below run, by its name on the page.
RUN_HERE = {
    "gunicorn", "uvicorn", "conn-max-age", "atomic-requests", "worker", "pgbouncer-ini",
    "pgbouncer", "systemd-web", "systemd-worker", "compose",
}  # fmt: skip


def serve_and_order(machine: Machine, command: Command, log: Path) -> int:
    """Run a web command, place an order through it, stop it with SIGTERM (exit 0)."""
    with running(command, log) as proc:
        wait_until_serving(machine.port, proc, log)
        status, order = place_order(machine.port)
        assert status == 201, log.read_text()
        assert scalar(machine.dsn, "SELECT count(*) FROM shop_order WHERE id = %s", [order]) == 1
        assert scalar(
            machine.dsn, "SELECT count(*) FROM shop_orderconfirmation WHERE order_id = %s", [order]
        ) == 1  # fmt: skip
        exit_status, _ = stop(proc)
    assert exit_status == 0, log.read_text()
    return order or 0


def test_every_block_of_the_guide_is_run_or_says_why_not() -> None:
    found = blocks(PAGE)
    named = page_blocks()
    assert set(named) == RUN_HERE
    for b in found:
        reasons = [d.partition(" ")[2] for d in b.directives if d.startswith("not-here ")]
        kinds = [d for d in b.directives if d.startswith(("deploy ", "not-here "))]
        assert len(kinds) == 1, f"block at line {b.line}: {b.directives}"
        assert not reasons or len(reasons[0]) > 20, f"block at line {b.line}: say why not here"


@pytest.mark.parametrize("line", [0, 1], ids=["sync", "gthread"])
def test_gunicorn_serves_the_shop(machine: Machine, tmp_path: Path, line: int) -> None:
    command = machine.page_commands("gunicorn")[line]
    serve_and_order(machine, command, tmp_path / "web.log")


def test_uvicorn_serves_the_shop(machine: Machine, tmp_path: Path) -> None:
    (command,) = machine.page_commands("uvicorn")
    assert "shopsite.asgi:application" in command.args
    serve_and_order(machine, command, tmp_path / "web.log")


def test_kept_connections_are_checked_before_reuse(machine: Machine, tmp_path: Path) -> None:
    (command,) = machine.page_commands("conn-max-age")
    log = tmp_path / "web.log"
    with running(command, log) as proc:
        wait_until_serving(machine.port, proc, log)
        for _ in range(12):
            assert place_order(machine.port)[0] == 201
        # CONN_MAX_AGE=60: the connections outlive the requests, one per gunicorn worker.
        kept = connections(machine.dsn)[WEB]
        assert 1 <= kept <= 4
        assert terminate(machine.dsn, WEB) == kept
        # CONN_HEALTH_CHECKS=1: each worker finds its connection dead and opens another.
        statuses = [place_order(machine.port)[0] for _ in range(12)]
        assert statuses == [201] * 12, log.read_text()


def test_without_health_checks_a_cut_connection_fails_one_request(
    machine: Machine, tmp_path: Path
) -> None:
    (command,) = machine.page_commands("conn-max-age")
    command.env["DJANGO_CONN_HEALTH_CHECKS"] = "0"
    command.args[command.args.index("--workers") + 1] = "1"  # one connection to cut
    log = tmp_path / "web.log"
    with running(command, log) as proc:
        wait_until_serving(machine.port, proc, log)
        assert place_order(machine.port)[0] == 201
        assert terminate(machine.dsn, WEB) == 1
        statuses = [place_order(machine.port)[0] for _ in range(3)]
    assert statuses == [500, 201, 201]


def test_without_conn_max_age_no_connection_outlives_its_request(
    machine: Machine, tmp_path: Path
) -> None:
    command = machine.page_commands("gunicorn")[0]
    log = tmp_path / "web.log"
    with running(command, log) as proc:
        wait_until_serving(machine.port, proc, log)
        for _ in range(5):
            assert place_order(machine.port)[0] == 201
        assert connections(machine.dsn)[WEB] == 0


@pytest.fixture
def failing_ring_push(shop_dsn: str) -> Iterator[str]:
    """A trigger that makes the OrderEvent ring's push of a 13.13 order fail, after the order
    and its confirmation were written in the same transaction; the total to send."""
    import psycopg

    with psycopg.connect(shop_dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION fail_13_13() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "RAISE EXCEPTION 'the test refuses order events of 13.13'; END $$"
        )
        conn.execute(
            "CREATE TRIGGER fail_13_13 BEFORE INSERT OR UPDATE ON shop_orderevent FOR EACH ROW "
            "WHEN (NEW.total = 13.13) EXECUTE FUNCTION fail_13_13()"
        )
    yield "13.13"
    with psycopg.connect(shop_dsn, autocommit=True) as conn:
        conn.execute("DROP TRIGGER fail_13_13 ON shop_orderevent")
        conn.execute("DROP FUNCTION fail_13_13()")


@pytest.mark.parametrize("atomic", ["1", "0"], ids=["atomic-requests", "view-atomic"])
def test_a_failed_push_leaves_no_order_and_no_message(
    machine: Machine, tmp_path: Path, failing_ring_push: str, atomic: str
) -> None:
    (command,) = machine.page_commands("atomic-requests")
    assert command.env["DJANGO_ATOMIC_REQUESTS"] == "1"
    command.env["DJANGO_ATOMIC_REQUESTS"] = atomic
    log = tmp_path / "web.log"
    count = (
        "SELECT (SELECT count(*) FROM shop_order) + (SELECT count(*) FROM shop_orderconfirmation)"
    )
    with running(command, log) as proc:
        wait_until_serving(machine.port, proc, log)
        before = scalar(machine.dsn, count)
        assert place_order(machine.port, total=failing_ring_push)[0] == 500
        assert scalar(machine.dsn, count) == before
        assert place_order(machine.port, total="13.14")[0] == 201
        assert scalar(machine.dsn, count) == before + 2


def test_a_worker_holds_n_plus_2_connections(machine: Machine, tmp_path: Path) -> None:
    (command,) = machine.page_commands("worker")
    n = int(command.args[command.args.index("--concurrency") + 1])
    log = tmp_path / "worker.log"
    with running(command, log) as proc:
        # A thread's connection each, the maintenance thread's, the listener's.
        wait_for(lambda: connections(machine.dsn)[WORKER] == n + 2, f"{n + 2} connections", log)
        assert stop(proc)[0] == 0, log.read_text()
    assert connections(machine.dsn)[WORKER] == 0


def unit(name: str) -> configparser.ConfigParser:
    """A unit file of the page (systemd's syntax is close enough to ini for the keys read)."""
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(block(name).code.split("\n", 1)[1])
    return parser


def unit_command(machine: Machine, name: str) -> tuple[Command, float]:
    """A unit's ExecStart with its Environment= lines, and its TimeoutStopSec."""
    service = unit(name)["Service"]
    assert service["WorkingDirectory"] == SRV
    assert service["KillSignal"] == "SIGTERM"
    prefix = "Environment="
    settings = [line.removeprefix(prefix) for line in block(name).code.splitlines()
                if line.startswith(prefix)]  # fmt: skip
    env = dict(setting.split("=", 1) for setting in settings)
    command = machine.command(service["ExecStart"].split(), env)
    return command, float(service["TimeoutStopSec"])


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_the_units_verify(tmp_path: Path) -> None:
    files = {"systemd-web": "shop-web.service", "systemd-worker": "shop-worker@.service"}
    for name, file in files.items():
        text = block(name).code.replace(f"{SRV}/.venv/bin/", f"{VENV_BIN}/")
        (tmp_path / file).write_text(text.replace(SRV, str(EXAMPLE)))
    done = subprocess.run(
        ["systemd-analyze", "verify", "shop-web.service", "shop-worker@1.service"],
        cwd=tmp_path, capture_output=True, text=True, timeout=PATIENCE, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, ""), done.stderr


def test_the_units_serve_and_stop_within_their_timeouts(machine: Machine, tmp_path: Path) -> None:
    web, web_timeout = unit_command(machine, "systemd-web")
    worker, worker_timeout = unit_command(machine, "systemd-worker")
    with running(web, tmp_path / "web.log") as web_proc, running(worker, tmp_path / "w.log") as w:
        wait_until_serving(machine.port, web_proc, tmp_path / "web.log")
        status, order = place_order(machine.port)
        assert status == 201
        sent = "SELECT count(*) FROM shop_sentconfirmation WHERE order_id = %s"
        wait_for(lambda: scalar(machine.dsn, sent, [order]) == 1, "the e-mail", tmp_path / "w.log")
        for proc, timeout in ((w, worker_timeout), (web_proc, web_timeout)):
            exit_status, seconds = stop(proc)  # KillSignal=SIGTERM
            assert exit_status == 0 and seconds < timeout


def test_the_grace_period_covers_a_worker_stopped_in_a_backlog(
    machine: Machine, tmp_path: Path
) -> None:
    worker, timeout = unit_command(machine, "systemd-worker")
    compose = yaml.safe_load(block("compose").code)["services"]["worker"]
    assert compose["stop_signal"] == "SIGTERM"
    assert float(compose["stop_grace_period"].rstrip("s")) == timeout  # the same on both
    push = (
        "from shop.models import OrderConfirmation as C; "
        "C.queue.push_many([{'order_id': 10_000_000 + i, 'email': 'b@example.com'} "
        "for i in range(3000)])"
    )
    run_to_end(machine.command(["python", "manage.py", "shell", "-c", push], PAGE_ENV))
    sent = "SELECT count(*) FROM shop_sentconfirmation WHERE order_id >= 10000000"
    log = tmp_path / "worker.log"
    with running(worker, log) as proc:
        wait_for(lambda: scalar(machine.dsn, sent) > 0, "the first e-mails", log)
        exit_status, seconds = stop(proc)
    assert exit_status == 0 and seconds < timeout, log.read_text()
    assert scalar(machine.dsn, sent) < 3000  # stopped in the middle of the backlog
    # What it handed back is ready at once: a burst drains it, each e-mail sent once.
    run_to_end(machine.command(["python", "manage.py", "runqueueworker", "--burst"], PAGE_ENV))
    assert scalar(machine.dsn, sent) == 3000
    assert scalar(machine.dsn, sent + " AND deliveries > 1") == 0


def compose_command(machine: Machine, service: dict[str, Any]) -> Command:
    """A compose service's command and environment (the page's ``db`` is the test's server)."""
    assert service["working_dir"] == SRV
    env = {
        k: str(v).replace("@db:5432", "@127.0.0.1:5432") for k, v in service["environment"].items()
    }
    return machine.command([str(a) for a in service["command"]], env)


def test_the_compose_services_run_two_workers(machine: Machine, tmp_path: Path) -> None:
    services = yaml.safe_load(block("compose").code)["services"]
    web = compose_command(machine, services["web"])
    worker = compose_command(machine, services["worker"])
    replicas = services["worker"]["deploy"]["replicas"]
    n = int(worker.args[worker.args.index("--concurrency") + 1])
    grace = float(services["worker"]["stop_grace_period"].rstrip("s"))
    stop_signal = getattr(signal, services["worker"]["stop_signal"])
    log = tmp_path / "worker-0.log"
    with contextlib.ExitStack() as stack:
        web_proc = stack.enter_context(running(web, tmp_path / "web.log"))
        wait_until_serving(machine.port, web_proc, tmp_path / "web.log")
        workers = [
            stack.enter_context(running(worker, tmp_path / f"worker-{i}.log"))
            for i in range(replicas)
        ]
        wait_for(
            lambda: connections(machine.dsn)[WORKER] == replicas * (n + 2),
            f"{replicas} x {n + 2} connections", log,
        )  # fmt: skip
        orders = [place_order(machine.port)[1] for _ in range(40)]
        sent = "SELECT count(*) FROM shop_sentconfirmation WHERE order_id = ANY(%s)"
        wait_for(lambda: scalar(machine.dsn, sent, [orders]) == 40, "40 e-mails", log)
        # SKIP LOCKED: no order was handed to both workers.
        assert scalar(machine.dsn, sent + " AND deliveries > 1", [orders]) == 0
        for proc in workers:
            exit_status, seconds = stop(proc, stop_signal)
            assert exit_status == 0 and seconds < grace


def test_the_pages_commands_are_the_examples(machine: Machine) -> None:
    """The page's command lines name the example's real entry points."""
    text = PAGE.read_text()
    assert (EXAMPLE / "shopsite" / "wsgi.py").exists() and "shopsite.wsgi" in text
    assert (EXAMPLE / "shopsite" / "asgi.py").exists() and "shopsite.asgi:application" in text
    for argv in commands(block("worker").code):
        assert re.search(r"runqueueworker --concurrency \d+", " ".join(argv))
