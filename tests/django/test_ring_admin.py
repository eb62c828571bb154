"""The ring queue admin through Django's test client: the slots' list with the ring's
occupancy, the failed messages with Retry and Delete, the overview, and permissions."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest
from django.contrib import admin
from django.test import Client

from dbqueue.message import State
from dbqueue.ring import RingQueue
from dbqueue.ring.states import SideState
from dbqueue_django.executor import DjangoExecutor
from dbqueue_django.ring_admin import RingFailedAdmin, RingQueueModelAdmin
from tests.django.admin_items import failed_tick as make_failed
from tests.django.admin_users import login_superuser, staff_with
from tests.django.testapp.models import Tick

# Transactional: a rolled-back push still spends its ring number (sequences are not
# transactional), which would leave the next test's slots waiting for numbers never written.
pytestmark = [pytest.mark.django, pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

SLOTS = "/admin/testapp/tick/"
FAILED = "/admin/testapp/tickfailed/"
OVERVIEW = "/admin/dbqueue_django/queueoverview/"
CAPACITY = 8


@pytest.fixture
def superuser(client: Client) -> Client:
    return login_superuser(client)


def push(*symbols: str) -> list[int]:
    return Tick.queue.push_many([{"symbol": s, "price": Decimal("1.5")} for s in symbols])


def action(client: Client, url: str, name: str, ids: list[int], **extra: Any) -> Any:
    data = {"action": name, "_selected_action": [str(i) for i in ids], "index": "0", **extra}
    return client.post(url, data, follow=True)


def counts(response: Any) -> dict[str, Any]:
    return {c.label: c for c in response.context["queue_counts"]}


# -- pages ------------------------------------------------------------------------------------


def test_the_ring_and_its_failed_table_are_registered() -> None:
    assert isinstance(admin.site.get_model_admin(Tick), RingQueueModelAdmin)
    assert isinstance(admin.site.get_model_admin(Tick.failed_model), RingFailedAdmin)


def test_the_index_lists_both(superuser: Client) -> None:
    page = superuser.get("/admin/").content.decode()
    assert "Ticks" in page and "Failed ticks" in page


def test_the_slots_list_shows_occupancy_and_messages(superuser: Client) -> None:
    make_failed("DEAD")
    first, second, _ = push("<ACME>", "B", "C")
    Tick.queue.pop_batch(1)  # leases the first
    response = superuser.get(SLOTS)
    assert response.status_code == 200
    shown = counts(response)
    assert (shown["slots"].value, shown["slots"].note) == (CAPACITY, "38% in use")
    assert (shown["ready"].value, shown["leased"].value, shown["retrying"].value) == (2, 1, 0)
    assert shown["failed"].value == 1 and shown["failed"].url == FAILED
    assert [t.id for t in response.context["cl"].result_list] == [first, second, second + 1]
    page = response.content.decode()
    assert "&lt;ACME&gt;" in page and "<ACME>" not in page
    assert f'<a href="{FAILED}">failed</a>' in page
    assert "38% in use" in page


@pytest.mark.parametrize(("state", "expected"), [("1", {"R"}), ("2", {"L"})])
def test_the_state_filter(superuser: Client, state: str, expected: set[str]) -> None:
    push("L", "W", "R")
    _, waiting = Tick.queue.pop_batch(2)
    Tick.queue.fail(waiting, "later", delay=dt.timedelta(hours=1))  # out of the ring
    response = superuser.get(SLOTS, {"state": state})
    assert {t.symbol for t in response.context["cl"].result_list} == expected


@pytest.mark.parametrize(
    ("state", "expected"), [(None, {"DEAD"}), ("0", {"W"}), ("3", {"DEAD"}), ("all", {"DEAD", "W"})]
)
def test_the_side_table_lists_failed_messages_unless_asked(
    superuser: Client, state: str | None, expected: set[str]
) -> None:
    make_failed("DEAD")
    push("W")
    (waiting,) = Tick.queue.pop_batch(1)
    Tick.queue.fail(waiting, "later", delay=dt.timedelta(hours=1))
    response = superuser.get(FAILED, {} if state is None else {"state": state})
    assert {t.symbol for t in response.context["cl"].result_list} == expected


def test_the_detail_pages_are_read_only(superuser: Client) -> None:
    (number,) = push("X")
    (item,) = Tick.queue.pop_batch(1)
    response = superuser.get(f"{SLOTS}{number % CAPACITY}/change/")
    assert response.status_code == 200
    page = response.content.decode()
    assert 'name="_save"' not in page and 'name="symbol"' not in page
    assert superuser.get(f"{SLOTS}add/").status_code == 403
    Tick.queue.fail(item, "Traceback\nKeyError: '<k>'", delay=dt.timedelta(hours=1))
    response = superuser.get(f"{FAILED}{number}/change/")  # waiting out of the ring
    assert response.status_code == 200
    page = response.content.decode()
    assert '<pre class="dbqueue-traceback">Traceback' in page
    assert "KeyError: &#x27;&lt;k&gt;&#x27;" in page
    assert 'name="_save"' not in page and 'name="symbol"' not in page


def test_delete_empties_the_slots(superuser: Client) -> None:
    a, b = push("A", "B")
    slot = a % CAPACITY
    assert "Are you sure" in action(superuser, SLOTS, "delete_selected", [slot]).content.decode()
    response = action(superuser, SLOTS, "delete_selected", [slot], post="yes")
    assert "Successfully deleted 1 tick." in response.content.decode()
    assert [t.id for t in Tick.queue.items()] == [b]
    assert Tick.objects.count() == CAPACITY  # slots are emptied, never deleted


def test_the_failed_list_shows_the_ring_counts(superuser: Client) -> None:
    number = make_failed("DEAD")
    response = superuser.get(FAILED)
    assert response.status_code == 200
    assert [f.id for f in response.context["cl"].result_list] == [number]
    assert counts(response)["failed"].value == 1
    page = response.content.decode()
    assert "DEAD" in page and "ValueError: &lt;b&gt;bad&lt;/b&gt;" in page
    detail = superuser.get(f"{FAILED}{number}/change/").content.decode()
    assert '<pre class="dbqueue-traceback">Traceback ...' in detail


def test_retry_pushes_failed_messages_again(superuser: Client) -> None:
    number = make_failed("AGAIN")
    response = action(superuser, FAILED, "retry_messages", [number])
    assert "1 message(s) pushed again." in response.content.decode()
    assert not Tick.failed_model.objects.exists()
    (item,) = Tick.queue.items("ready")
    assert (item.symbol, item.attempts) == ("AGAIN", 0) and item.id > number


def test_retry_into_a_full_ring_says_how_many_wait_for_a_slot(superuser: Client) -> None:
    failed = [make_failed("F1"), make_failed("F2")]
    push(*[f"S{i}" for i in range(CAPACITY - 1)])
    response = action(superuser, FAILED, "retry_messages", failed)
    page = response.content.decode()
    assert "1 message(s) pushed again. 1 wait(s) aside for a free slot (the ring is full)" in page
    (aside,) = Tick.failed_model.objects.all()
    assert (aside.state, aside.attempts) == (State.READY, 0)  # no longer failed
    assert not Tick.queue.failed().exists()
    Tick.queue.pop_batch(CAPACITY, mode="at_most_once")  # room again: the sweeper pushes it
    assert Tick.queue.rescue().returned == 1
    assert [t.symbol for t in Tick.queue.items()] == [aside.symbol]


def test_delete_failed_messages(superuser: Client) -> None:
    number = make_failed("DEAD")
    response = action(superuser, FAILED, "delete_selected", [number], post="yes")
    assert "Successfully deleted 1 failed tick." in response.content.decode()
    assert not Tick.failed_model.objects.exists()


def test_the_overview_shows_the_ring_with_its_occupancy(superuser: Client) -> None:
    make_failed("DEAD")
    push("A", "B")
    response = superuser.get(OVERVIEW)
    rows = {row["label"]: row for row in response.context["rows"]}
    ring = rows["Testapp / ticks"]
    assert (ring["stats"]["ready"], ring["occupancy"], ring["url"]) == (2, "2 / 8 (25%)", SLOTS)
    assert rows["Testapp / pings"]["occupancy"] == "-"
    assert f'href="{FAILED}">1<' in response.content.decode()


# -- permissions ------------------------------------------------------------------------------


def test_view_permission_shows_but_cannot_retry(client: Client) -> None:
    staff = staff_with(client, "view_tick", "view_tickfailed")
    number = make_failed("DEAD")
    assert staff.get(SLOTS).status_code == 200
    response = staff.get(FAILED)
    assert response.status_code == 200
    choices = response.context["action_form"]
    assert choices is None or not [c for c, _ in choices.fields["action"].choices if c]
    action(staff, FAILED, "retry_messages", [number])
    assert Tick.failed_model.objects.filter(pk=number).exists()
    assert [r["label"] for r in staff.get(OVERVIEW).context["rows"]] == ["Testapp / ticks"]


def test_staff_without_permissions_see_no_ring(client: Client) -> None:
    staff = staff_with(client)
    assert staff.get(SLOTS).status_code == 403
    assert staff.get(FAILED).status_code == 403


# -- spilled messages -------------------------------------------------------------------------


def spill(*symbols: str) -> list[int]:
    """Push into Tick as a ring declared when_full='spill' does (Tick itself waits)."""
    spec = Tick.queue.spec
    options = replace(spec.options, when_full="spill", push_timeout=dt.timedelta(seconds=5))
    ex = DjangoExecutor("default")
    ring = RingQueue(replace(spec, options=options), ex.dialect)
    return ring.push_many(ex, [{"symbol": s, "price": Decimal("1.5")} for s in symbols])


def test_spilled_messages_are_counted_listed_apart_and_never_retried(superuser: Client) -> None:
    make_failed("DEAD")
    numbers = spill(*[f"S{i}" for i in range(CAPACITY + 2)])
    spilled = numbers[CAPACITY:]
    shown = counts(superuser.get(SLOTS))
    assert (shown["ready"].value, shown["spilled"].value) == (CAPACITY + 2, 2)
    assert shown["spilled"].url == f"{FAILED}?state={int(SideState.SPILLED)}"
    assert shown["failed"].value == 1
    # The side table's default list is the failures: not the spilled messages.
    assert {t.symbol for t in superuser.get(FAILED).context["cl"].result_list} == {"DEAD"}
    listed = superuser.get(FAILED, {"state": str(int(SideState.SPILLED))})
    assert sorted(t.id for t in listed.context["cl"].result_list) == spilled
    assert ">spilled<" in listed.content.decode()
    detail = superuser.get(f"{FAILED}{spilled[0]}/change/")
    assert detail.context["title"] == "View spilled tick" and "retry_url" not in detail.context
    spilled_list = f"{FAILED}?state={int(SideState.SPILLED)}"
    response = action(superuser, spilled_list, "retry_messages", spilled)
    assert "2 were not failed messages and stayed as they were." in response.content.decode()
    assert Tick.failed_model.objects.filter(state=int(SideState.SPILLED)).count() == 2
