"""Prometheus metrics in Django: the view a project mounts (``dbqueue_django.views.metrics``,
through the test client), ``runqueueworker --metrics-port`` served over HTTP, and the errors
of a bad port and of a missing ``metrics`` extra."""

from __future__ import annotations

import io
import signal
import sys
import urllib.request
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from bench.loadtest.shop import free_port
from dbqueue.metrics import EXTRA_MISSING
from dbqueue_django.views import metrics_view
from tests.django.commands import (
    PATIENCE,
    assert_one_line_error,
    command_env,
    run_command,
    start_command,
    wait_for,
)
from tests.django.testapp.models import Ping

pytestmark = [
    pytest.mark.django,
    pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
]

PING = "testapp.Ping@default"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.mark.postgresql
def test_the_view_serves_each_queues_depth_from_the_database(client: Client) -> None:
    before = Ping.queue.pushed()  # the sequence outlives a test's flush
    Ping.queue.push_many([{"message": m} for m in ("a", "b", "c")])
    Ping.queue.pop_batch(1)
    response = client.get("/metrics/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    found = samples(response.content.decode())
    assert found[("dbqueue_stats_up", (("queue", PING),))] == 1
    assert found[("dbqueue_depth", (("queue", PING), ("state", "ready")))] == 2
    assert found[("dbqueue_depth", (("queue", PING), ("state", "leased")))] == 1
    assert found[("dbqueue_pushed_total", (("queue", PING),))] == before + 3
    assert ("dbqueue_oldest_ready_age_seconds", (("queue", PING),)) in found


@pytest.mark.postgresql
def test_a_view_of_chosen_models_reads_them_only() -> None:
    view = metrics_view([Ping], cache_for=0)
    from django.test import RequestFactory

    first = samples(view(RequestFactory().get("/m")).content.decode())
    assert {labels for _, labels in first if labels[:1] != (("queue", PING),)} == set()
    Ping.queue.push(message="x")
    again = samples(view(RequestFactory().get("/m")).content.decode())
    pushed = ("dbqueue_pushed_total", (("queue", PING),))
    assert again[pushed] == first[pushed] + 1  # the sequence outlives a test's flush


def test_the_view_without_the_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    from django.test import RequestFactory

    with pytest.raises(ImproperlyConfigured, match=r"dbqueue\[metrics\]"):
        metrics_view([Ping])(RequestFactory().get("/m"))


@pytest.mark.postgresql
def test_runqueueworker_serves_its_metrics(tmp_path: Path) -> None:
    before = Ping.queue.pushed()
    Ping.queue.push_many([{"message": f"m{i}"} for i in range(3)])
    port, log = free_port(), tmp_path / "worker.log"
    proc = start_command(
        "runqueueworker", "testapp.Ping", "--metrics-port", str(port), log=log, env=command_env()
    )
    url = f"http://127.0.0.1:{port}/metrics"
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    def handled_all() -> bool:
        nonlocal found
        try:
            with urllib.request.urlopen(url, timeout=PATIENCE) as response:
                found = samples(response.read().decode())
        except OSError:  # not listening yet
            return False
        return found.get(("dbqueue_handled_total", (("queue", PING),))) == 3

    try:
        wait_for(handled_all, "3 items handled on the metrics port", log)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(PATIENCE) == 0, log.read_text()
    assert found[("dbqueue_pushed_total", (("queue", PING),))] == before + 3
    assert found[("dbqueue_handler_duration_seconds_count", (("queue", PING),))] == 3
    assert f"metrics on http://0.0.0.0:{port}/metrics" in log.read_text()


@pytest.mark.parametrize("value", ["-1", "65536", "http"])
def test_a_bad_metrics_port_is_a_usage_error(value: str) -> None:
    done = run_command("runqueueworker", "--metrics-port", value)
    assert done.returncode == 2
    assert_one_line_error(done, "--metrics-port")


@pytest.mark.postgresql
def test_a_port_in_use_is_a_one_line_error() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))  # where the worker listens
        taken.listen()
        port = taken.getsockname()[1]
        done = run_command("runqueueworker", "testapp.Ping", "--metrics-port", str(port))
    assert_one_line_error(done, f"cannot serve metrics on 0.0.0.0:{port}")


def test_without_the_extra_the_metrics_port_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(CommandError) as raised:
        call_command(
            "runqueueworker", "testapp.Ping", "--metrics-port", "9100", stdout=io.StringIO()
        )
    assert str(raised.value) == EXTRA_MISSING


@pytest.mark.postgresql
def test_a_queue_with_groups_reads_as_one_queue_per_group() -> None:
    from tests.django.testapp.models import FanoutJob

    view = metrics_view([FanoutJob], cache_for=0)
    from django.test import RequestFactory

    before = FanoutJob.queue.pushed()
    FanoutJob.queue.push_many([{"subject": "a"}, {"subject": "b"}])
    FanoutJob.queue.group("email").pop_batch(1)
    found = samples(view(RequestFactory().get("/m")).content.decode())
    email, search = (f"testapp.FanoutJob[{g}]@default" for g in ("email", "search"))
    assert found[("dbqueue_stats_up", (("queue", email),))] == 1
    assert found[("dbqueue_depth", (("queue", email), ("state", "leased")))] == 1
    assert found[("dbqueue_depth", (("queue", search), ("state", "ready")))] == 2
    assert found[("dbqueue_pushed_total", (("queue", search),))] == before + 2
