"""The queue admin through Django's test client: the pages staff see, the actions and their
permissions, and what users without the permissions get."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from dbqueue.message import State
from dbqueue_django.admin import QueueModelAdmin, format_age, register_queue_models
from dbqueue_django.admin_common import list_time
from dbqueue_django.models import QueueOverview
from tests.django.admin_items import failed_ping as make_failed
from tests.django.admin_users import login_superuser, staff_with
from tests.django.testapp.models import FanoutJob, Job, KeptJob, Ping

pytestmark = [pytest.mark.django, pytest.mark.postgresql, pytest.mark.django_db]

CHANGELIST = "/admin/testapp/ping/"
KEPT = "/admin/testapp/keptjob/"
OVERVIEW = "/admin/dbqueue_django/queueoverview/"


@pytest.fixture
def superuser(client: Client) -> Client:
    return login_superuser(client)


def make_done(*names: str) -> list[int]:
    """KeptJobs handled and acked: kept as done items (its QueueOptions.keep_done)."""
    ids = KeptJob.queue.push_many([{"name": name} for name in names])
    assert KeptJob.queue.ack(KeptJob.queue.pop_batch(len(ids))) == ids
    return ids


def action(
    client: Client, name: str, ids: list[int], *, url: str = CHANGELIST, **extra: Any
) -> Any:
    data = {"action": name, "_selected_action": [str(i) for i in ids], "index": "0", **extra}
    return client.post(url, data, follow=True)


# -- pages --------------------------------------------------------------------------------------


def test_every_queue_model_is_registered_without_an_admin_module() -> None:
    for model in (Job, Ping):
        assert isinstance(admin.site.get_model_admin(model), QueueModelAdmin)
    assert admin.site.is_registered(QueueOverview)


def test_the_generated_meta_and_head_models_have_no_admin_page() -> None:
    """They are the queue's bookkeeping, shown (the state) on its items' pages."""
    generated = [
        Job.queue_meta_model, Job.queue_head_model, Ping.queue_head_model,
        *FanoutJob.queue_group_models.values(), *FanoutJob.queue_group_head_models.values(),
    ]  # fmt: skip
    assert not [m for m in generated if admin.site.is_registered(m)]


def test_the_index_lists_the_queues_and_the_overview(superuser: Client) -> None:
    page = superuser.get("/admin/").content.decode()
    assert "Pings" in page
    assert "Jobs" in page
    assert "Queue overview" in page


def test_the_list_shows_counts_items_and_errors(superuser: Client) -> None:
    Ping.queue.push_many([{"message": f"m{i}"} for i in range(3)])
    make_failed("broken")
    response = superuser.get(CHANGELIST)
    assert response.status_code == 200
    page = response.content.decode()
    stats = response.context["queue_stats"]
    assert (stats["ready"], stats["failed"]) == (3, 1)
    assert "m0" in page
    assert "broken" in page
    assert "ValueError: &lt;b&gt;bad&lt;/b&gt;" in page  # escaped, last line only
    assert "<b>bad</b>" not in page


@pytest.mark.parametrize(
    ("state", "expected"),
    [("ready", {"r"}), ("scheduled", {"s"}), ("leased", {"l"}), ("failed", {"f"})],
)
def test_the_state_filter(superuser: Client, state: str, expected: set[str]) -> None:
    Ping.queue.push(message="l")
    Ping.queue.pop_batch(1)
    Ping.queue.push(message="r")
    Ping.queue.push(message="s", delay=dt.timedelta(hours=1))
    make_failed("f")
    response = superuser.get(CHANGELIST, {"state": state})
    shown = {obj.message for obj in response.context["cl"].result_list}
    assert shown == expected


def test_done_items_are_counted_filtered_and_listed(superuser: Client) -> None:
    make_done("d1", "d2")
    KeptJob.queue.push(name="r")
    response = superuser.get(KEPT)
    counts = {c.label: c for c in response.context["queue_counts"]}
    assert (counts["done"].value, counts["done"].url) == (2, "?state=done")
    assert counts["ready"].value == 1
    response = superuser.get(KEPT, {"state": "done"})
    shown = response.context["cl"].result_list
    assert {obj.name for obj in shown} == {"d1", "d2"}
    page = response.content.decode()
    assert '<td class="field-state">done</td>' in page
    # One column for when an item runs, or ran: a done item's is when it finished.
    assert "Run at / finished" in page and 'class="field-run_or_finished">-<' not in page
    ready = superuser.get(KEPT, {"state": "ready"}).context["cl"].result_list
    assert [obj.name for obj in ready] == ["r"]


def test_a_done_item_is_read_only_and_not_retried(superuser: Client) -> None:
    (done,) = make_done("d")
    page = superuser.get(f"{KEPT}{done}/change/").content.decode()
    assert 'name="_save"' not in page and 'name="name"' not in page
    response = action(superuser, "retry_items", [done], url=KEPT)
    assert "0 item(s) back to ready (1 not failed, left as they were)." in (
        response.content.decode()
    )
    item = KeptJob.queue.items().get(pk=done)
    assert (item.state, item.attempts) == (State.DONE, 1)  # type: ignore[attr-defined]


def test_the_detail_page_shows_the_traceback_read_only(superuser: Client) -> None:
    item_id = make_failed("broken", "Traceback (most recent call last):\n  x\nKeyError: '<k>'")
    response = superuser.get(f"{CHANGELIST}{item_id}/change/")
    assert response.status_code == 200
    page = response.content.decode()
    assert '<pre class="dbqueue-traceback">Traceback (most recent call last):' in page
    assert "KeyError: &#x27;&lt;k&gt;&#x27;" in page
    assert 'name="_save"' not in page  # nothing to save: items change through actions
    assert 'name="message"' not in page


def test_no_add_page(superuser: Client) -> None:
    assert superuser.get(f"{CHANGELIST}add/").status_code == 403


def test_the_overview_lists_every_queue(superuser: Client) -> None:
    Ping.queue.push(message="x")
    make_failed("y")
    response = superuser.get(OVERVIEW)
    assert response.status_code == 200
    rows = {row["label"]: row for row in response.context["rows"]}
    assert rows["Testapp / pings"]["stats"]["ready"] == 1
    assert rows["Testapp / pings"]["url"] == CHANGELIST
    assert "Testapp / jobs" in rows
    assert f'href="{CHANGELIST}?state=failed">1<' in response.content.decode()


def test_the_overview_links_the_done_items(superuser: Client) -> None:
    make_done("d")
    response = superuser.get(OVERVIEW)
    rows = {row["label"]: row for row in response.context["rows"]}
    assert rows["Testapp / kept jobs"]["stats"]["done"] == 1
    assert rows["Testapp / pings"]["stats"]["done"] == 0
    assert f'href="{KEPT}?state=done">1<' in response.content.decode()


# -- actions ------------------------------------------------------------------------------------


def test_retry_puts_failed_items_back(superuser: Client) -> None:
    failed = make_failed("f")
    ready = Ping.queue.push(message="r")
    response = action(superuser, "retry_items", [failed, ready])
    assert "1 item(s) back to ready (1 not failed, left as they were)." in response.content.decode()
    item = Ping.queue.items().get(pk=failed)
    assert (item.state, item.attempts) == (State.READY, 0)  # type: ignore[attr-defined]


def test_delete_removes_both_tables(superuser: Client) -> None:
    a, b = Ping.queue.push_many([{"message": "a"}, {"message": "b"}])
    confirm = action(superuser, "delete_selected", [a])
    assert "Are you sure" in confirm.content.decode()  # Django's confirmation page
    response = action(superuser, "delete_selected", [a], post="yes")
    assert "Successfully deleted 1 ping." in response.content.decode()
    assert list(Ping.objects.values_list("pk", flat=True)) == [b]
    assert list(Ping.queue_meta_model.objects.values_list("pk", flat=True)) == [b]


def test_the_delete_button_of_the_detail_page_removes_both_tables(superuser: Client) -> None:
    (a,) = Ping.queue.push_many([{"message": "a"}])
    superuser.post(f"{CHANGELIST}{a}/delete/", {"post": "yes"})
    assert not Ping.objects.exists()
    assert not Ping.queue_meta_model.objects.exists()


def test_the_actions_on_offer(superuser: Client) -> None:
    response = superuser.get(CHANGELIST)
    choices = [name for name, _ in response.context["action_form"].fields["action"].choices]
    assert {"retry_items", "set_priority", "delete_selected"} <= set(choices)


def test_set_priority(superuser: Client) -> None:
    a, b = Ping.queue.push_many([{"message": "a"}, {"message": "b"}])
    response = action(superuser, "set_priority", [b], priority="7")
    assert "1 item(s) now have priority 7." in response.content.decode()
    assert [p.id for p in Ping.queue.pop_batch(2)] == [b, a]


@pytest.mark.parametrize(("value", "error"), [("", "Enter the new priority"), ("99999", "range")])
def test_set_priority_refuses_bad_values(superuser: Client, value: str, error: str) -> None:
    (a,) = Ping.queue.push_many([{"message": "a"}])
    response = action(superuser, "set_priority", [a], priority=value)
    assert error in response.content.decode()
    assert Ping.queue.items().get(pk=a).priority == 0  # type: ignore[attr-defined]


# -- permissions --------------------------------------------------------------------------------


def test_anonymous_and_non_staff_users_are_sent_to_the_login(client: Client) -> None:
    assert client.get(CHANGELIST).status_code == 302
    user = User.objects.create_user("customer", "c@example.com", "pw")
    client.force_login(user)
    for url in (CHANGELIST, OVERVIEW):
        response = client.get(url)
        assert response.status_code == 302
        assert "/admin/login/" in response["Location"]


def test_staff_without_permissions_see_no_queue(client: Client) -> None:
    staff = staff_with(client)
    assert staff.get(CHANGELIST).status_code == 403
    assert staff.get(OVERVIEW).status_code == 403
    assert "Pings" not in staff.get("/admin/").content.decode()


def test_view_permission_shows_but_cannot_act(client: Client) -> None:
    staff = staff_with(client, "view_ping")
    failed = make_failed("f")
    response = staff.get(CHANGELIST)
    assert response.status_code == 200
    assert response.context["action_form"] is None or not [
        c for c, _ in response.context["action_form"].fields["action"].choices if c
    ]
    action(staff, "retry_items", [failed])
    assert Ping.queue.items().get(pk=failed).state == State.FAILED  # type: ignore[attr-defined]
    rows = staff.get(OVERVIEW).context["rows"]
    assert [r["label"] for r in rows] == ["Testapp / pings"]  # not the jobs queue


def test_change_permission_allows_retry_but_not_delete(client: Client) -> None:
    staff = staff_with(client, "view_ping", "change_ping")
    failed = make_failed("f")
    response = staff.get(CHANGELIST)
    choices = {c for c, _ in response.context["action_form"].fields["action"].choices}
    assert {"retry_items", "set_priority"} <= choices
    assert "delete_selected" not in choices
    action(staff, "delete_selected", [failed], post="yes")
    assert Ping.objects.filter(pk=failed).exists()
    action(staff, "retry_items", [failed])
    assert Ping.queue.items().get(pk=failed).state == State.READY  # type: ignore[attr-defined]


def test_a_queue_registered_by_the_project_is_left_alone() -> None:
    site = admin.AdminSite(name="custom")

    class MyPingAdmin(QueueModelAdmin):
        list_per_page = 10

    site.register(Ping, MyPingAdmin)
    register_queue_models(site)
    assert type(site.get_model_admin(Ping)) is MyPingAdmin
    assert isinstance(site.get_model_admin(Job), QueueModelAdmin)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "-"), (4.84, "4.8 s"), (192, "3 min 12 s"), (7500, "2 h 5 min"), (273600, "3 d 4 h")],
)
def test_ages_read_like_durations(seconds: float | None, text: str) -> None:
    age = None if seconds is None else dt.timedelta(seconds=seconds)
    assert format_age(age) == text


def test_list_times_leave_out_this_years_year() -> None:
    year = timezone.localtime().year
    this_year = list_time(dt.datetime(year, 11, 5, 14, 30, tzinfo=dt.UTC))
    assert '>Nov. 5</span> <span class="dbqueue-when">2:30 p.m.<' in this_year
    assert f'title="Nov. 5, {year}, 2:30 p.m."' in this_year  # the whole time on hover
    last_year = list_time(dt.datetime(year - 1, 11, 5, 14, 30, tzinfo=dt.UTC))
    assert f">11/05/{year - 1}</span>" in last_year
    assert list_time(None) == "-"
