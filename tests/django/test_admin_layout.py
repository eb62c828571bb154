"""The admin's pages in headless Chromium at 1280x800, served by a live server on SQLite: the
overview, every queue's list, the schedules' list and a failed item's page fit the window
without scrolling sideways, no cell of a list is cut off, and the action bar keeps to one
line."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.conf import settings
from django.contrib import admin
from django.test import Client
from pytest_django.fixtures import Settings
from pytest_django.live_server_helper import LiveServer

from dbqueue_django.admin_common import QueueTableAdmin
from dbqueue_django.schedule_rows import QueueSchedule
from tests.django import browser
from tests.django.admin_items import failed_ping as failed
from tests.django.admin_items import failed_task, failed_tick
from tests.django.admin_users import login_superuser
from tests.django.routing import OneDatabase
from tests.django.testapp.models import (
    FanoutJob,
    FanoutTick,
    Job,
    KeptJob,
    Ping,
    QueuedUniqueJob,
    RingJob,
    StoredUniqueJob,
    Tick,
    UniqueJob,
)
from tests.django.tracebacks import stored

pytestmark = [
    pytest.mark.django,
    pytest.mark.sqlite,
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, databases=["sqlite"]),
]

#: What a page's layout is, read in the browser: the page's width and the window's, the
#: list's scrolling box, the cells (and a traceback's box) whose content is wider than they
#: are, and whether the action bar's menu and its Run button share a line.
MEASURE = """() => {
  const cut = [];
  const cells = '#result_list th, #result_list td, .readonly pre';
  for (const cell of document.querySelectorAll(cells)) {
    if (cell.scrollWidth > cell.clientWidth + 1) {
      cut.push(`${cell.className}: ${cell.textContent.trim().slice(0, 40)}`);
    }
  }
  const results = document.querySelector('#changelist-form .results');
  const menu = document.querySelector('#changelist .actions select');
  const run = document.querySelector('#changelist .actions button');
  const top = (el) => el.getBoundingClientRect().top;
  return {
    page: document.documentElement.scrollWidth,
    window: window.innerWidth,
    results: results && [results.scrollWidth, results.clientWidth],
    cut,
    oneLineBar: !menu || !run || Math.abs(top(menu) - top(run)) < 4,
    cells: document.querySelectorAll('#result_list td').length,
    tracebacks: document.querySelectorAll('.readonly pre').length,
  };
}"""

#: A long line without a space (a URL, a host), which nothing can wrap but the page's CSS.
UNBROKEN = "https://shop.example.com/orders/" + "x" * 120


@pytest.fixture
def on_sqlite(settings: Settings) -> None:
    """Every model on SQLite, for this test and the live server's thread."""
    settings.DATABASE_ROUTERS = [OneDatabase("sqlite")]


def fill_queues() -> dict[str, int]:
    """Every queue with items whose columns are long; the failed items' ids."""
    refused = stored(ConnectionRefusedError(111, f"Connection refused: {UNBROKEN}"))
    ids = {"ping": failed(UNBROKEN, refused)}
    Ping.queue.push_many([{"message": f"order {i} " + "lorem ipsum " * 12} for i in range(20)])
    doc = {"customer": "ada@example.com", "lines": [{"sku": "A" * 40, "qty": 3}] * 3}
    Job.queue.push_many([{"name": "n" * 50, "n": 10**9, "doc": doc}] * 5)
    kept = KeptJob.queue.push_many([{"name": "done " * 10}] * 3)
    KeptJob.queue.ack(KeptJob.queue.pop_batch(len(kept)))
    RingJob.queue.push_many([{"name": "ring " * 10, "doc": doc}] * 3)
    RingJob.queue.fail(RingJob.queue.pop_batch(1), refused, retry=False)
    ids["tick"] = failed_tick("DEADBEEF", refused)
    Tick.queue.push_many([{"symbol": "ACME", "price": Decimal("12345678.1234")}] * 3)
    # Unique queues list their keys: the longest a key is stored as (a digest beyond that).
    UniqueJob.queue.push_many([{"account": "a" * 50, "kind": f"k{i}" * 10} for i in range(3)])
    QueuedUniqueJob.queue.push_many([{"tag": f"{i}" + UNBROKEN[:49]} for i in range(3)])
    for i in range(3):
        StoredUniqueJob.queue.push(tag="t", unique_key=f"{i}" + "k" * 254)
    FanoutJob.queue.push_many([{"subject": "fan-out " * 12}] * 3)
    FanoutTick.queue.push_many([{"subject": "fan-out " * 12, "note": UNBROKEN}] * 3)
    for group in FanoutTick.queue.spec.options.groups:  # a failed message in each side list
        FanoutTick.queue.group(group).fail(
            FanoutTick.queue.group(group).pop_batch(1), refused, retry=False
        )
    ids["task"] = failed_task("emails", refused, runs=2)
    since = dt.datetime(2026, 11, 27, 2, 0, tzinfo=dt.UTC)
    for i in range(3):
        QueueSchedule.objects.create(
            name=f"shop.handlers.build_nightly_report_for_every_warehouse_{i}",
            queue="shop.Report@default",
            expression="0 3 * * mon-fri",
            timezone="America/Argentina/Buenos_Aires",
            since=since,
            last_tick=since,
            next_tick=since + dt.timedelta(days=1),
        )
    return ids


def admin_pages(ids: dict[str, int]) -> list[str]:
    """The overview, every queue's list (the failed items' too), the schedules' list, and
    failed items' pages."""
    lists = [
        f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
        for model, model_admin in admin.site._registry.items()
        if isinstance(model_admin, QueueTableAdmin)
        # A grouped ring's own side list holds only what spilled before any group got it.
        and model is not FanoutTick.failed_model
    ]
    return [
        "/admin/dbqueue_django/queueoverview/",
        *lists,
        "/admin/testapp/ping/?state=failed",
        "/admin/dbqueue_django/queueschedule/",
        f"/admin/testapp/ping/{ids['ping']}/change/",
        f"/admin/testapp/tickfailed/{ids['tick']}/change/",
        f"/admin/dbqueue_django/taskitem/{ids['task']}/change/",
    ]


def test_every_admin_page_fits_a_1280_px_window(live_server: LiveServer, on_sqlite: None) -> None:
    browser.require_browser()
    pages = admin_pages(fill_queues())
    assert len(pages) >= 13  # the overview, 8 lists, the failed filter, schedules, 3 items
    session = login_superuser(Client()).cookies[settings.SESSION_COOKIE_NAME].value
    cookies = {settings.SESSION_COOKIE_NAME: session}
    problems = {}
    for path, layout in browser.visit(live_server.url, cookies, pages, MEASURE).items():
        assert isinstance(layout, dict), f"{path}: HTTP {layout}"
        if "/change/" in path:
            assert layout["tracebacks"] == 1, f"{path}: no traceback was measured"
        elif "queueoverview" not in path:
            assert layout["cells"] > 0, f"{path}: the list is empty, so nothing was measured"
        wide = layout["page"] > layout["window"]
        scrolls = layout["results"] and layout["results"][0] > layout["results"][1]
        if wide or scrolls or layout["cut"] or not layout["oneLineBar"]:
            problems[path] = layout
    assert not problems, "\n".join(f"{path}: {layout}" for path, layout in problems.items())
