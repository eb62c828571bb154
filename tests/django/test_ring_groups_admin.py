"""The admin of a ring with consumer groups, through Django's test client: its slots' list
shows one group's messages (the "consumer group" filter, the first group by default), with
that group's states, counts and errors; each group's side model lists its failed messages,
where Retry acts on that group; Delete deletes messages from every group; the overview has a
row per group."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib import admin
from django.test import Client

from dbqueue_django.ring_admin import GroupedRingQueueModelAdmin, RingFailedAdmin
from tests.django.admin_users import login_superuser
from tests.django.test_ring_groups import GROUPS, drain
from tests.django.testapp.models import FanoutTick

# Transactional, as the ring admin's tests (see tests/django/test_ring_admin.py).
pytestmark = [pytest.mark.django, pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

SLOTS = "/admin/testapp/fanouttick/"
SIDE = "/admin/testapp/fanouttickside_{}/"
ZERO = dt.timedelta(0)


@pytest.fixture
def superuser(client: Client) -> Iterator[Client]:
    yield login_superuser(client)
    drain("default")


def failed_in_search(subject: str) -> int:
    """A message that failed for good in group "search" (and is still ready in "email"):
    its number in search's side table."""
    FanoutTick.queue.push(subject=subject)
    search = FanoutTick.queue.group("search")
    for attempt in (1, 2):
        (tick,) = search.pop_batch(1)
        search.fail(tick, f"ValueError: {subject} attempt {attempt}", delay=ZERO)
        search.rescue()
    return int(search.failed().get().id)


def action(client: Client, url: str, name: str, ids: list[int]) -> Any:
    data = {"action": name, "_selected_action": [str(i) for i in ids], "index": "0"}
    return client.post(url, data, follow=True)


def test_the_ring_and_each_groups_side_model_are_registered() -> None:
    assert isinstance(admin.site.get_model_admin(FanoutTick), GroupedRingQueueModelAdmin)
    for group in GROUPS:
        side = FanoutTick.queue_group_failed_models[group]
        assert isinstance(admin.site.get_model_admin(side), RingFailedAdmin)
    assert isinstance(admin.site.get_model_admin(FanoutTick.failed_model), RingFailedAdmin)


def test_the_list_shows_the_chosen_groups_messages(superuser: Client) -> None:
    FanoutTick.queue.push(subject="kept")
    (leased,) = FanoutTick.queue.group("email").pop_batch(1)
    email = superuser.get(SLOTS)
    assert email.status_code == 200
    (row,) = email.context["cl"].result_list
    assert row.id == leased.id and row.group_state == 2  # leased in email
    assert email.context["queue_stats"]["leased"] == 1
    search = superuser.get(f"{SLOTS}?group=search")
    (row,) = search.context["cl"].result_list
    assert row.group_state == 1 and search.context["queue_stats"]["ready"] == 1
    assert superuser.get(f"{SLOTS}?group=search&state=2").context["cl"].result_count == 0
    assert superuser.get(f"{SLOTS}?group=email&state=2").context["cl"].result_count == 1
    page = email.content.decode()
    assert "consumer group" in page and "kept" in page
    counts = {c.label: c for c in search.context["queue_counts"]}
    assert counts["failed"].url == SIDE.format("search")


def test_a_slots_page_renders_with_the_groups_state(superuser: Client) -> None:
    FanoutTick.queue.push(subject="page")
    (tick,) = FanoutTick.queue.group("search").pop_batch(1)
    page = superuser.get(f"{SLOTS}{tick.slot}/change/?_changelist_filters=group%3Dsearch")
    assert page.status_code == 200
    assert "consumer group search" in page.content.decode()


def test_each_groups_side_list_and_retry(superuser: Client) -> None:
    number = failed_in_search("mail")
    search = superuser.get(SIDE.format("search"))
    assert search.status_code == 200
    assert [r.id for r in search.context["cl"].result_list] == [number]
    assert "mail attempt 2" in search.content.decode()
    assert search.context["queue_stats"]["failed"] == 1
    email = superuser.get(SIDE.format("email"))
    assert email.context["cl"].result_count == 0
    response = action(superuser, SIDE.format("search"), "retry_messages", [number])
    assert "1 message(s) pushed again" in response.content.decode()
    assert FanoutTick.queue.group("search").failed().count() == 0
    assert FanoutTick.queue.group("search").count("ready") == 1
    assert FanoutTick.queue.group("email").count("ready") == 1  # untouched


def test_the_rings_own_side_list_renders(superuser: Client) -> None:
    page = superuser.get("/admin/testapp/fanouttickfailed/")
    assert page.status_code == 200 and page.context["queue_counts"] == []


def test_delete_removes_the_messages_from_every_group(superuser: Client) -> None:
    number = FanoutTick.queue.push(subject="delete")
    (row,) = FanoutTick.queue.group("email").items()
    data = {"action": "delete_selected", "_selected_action": [str(row.slot)], "post": "yes"}
    superuser.post(f"{SLOTS}?group=search", data, follow=True)
    for group in GROUPS:
        assert FanoutTick.queue.group(group).count() == 0, number


def test_the_overview_has_a_row_per_group(superuser: Client) -> None:
    failed_in_search("overview")
    page = superuser.get("/admin/dbqueue_django/queueoverview/").content.decode()
    assert "fanout ticks [email]" in page and "fanout ticks [search]" in page
    assert SIDE.format("search") in page and SIDE.format("email") in page
