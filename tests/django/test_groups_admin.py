"""The admin of a queue with consumer groups, through Django's test client: its list shows
one group's deliveries (the "consumer group" filter, the first group by default), with that
group's states, counts and errors; Retry, Cancel and Set priority act on that group; Delete
deletes items from every group; the overview has a row per group."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.test import Client

from dbqueue.message import State
from tests.django.admin_users import login_superuser
from tests.django.testapp.models import FanoutJob

pytestmark = [pytest.mark.django, pytest.mark.postgresql, pytest.mark.django_db]

CHANGELIST = "/admin/testapp/fanoutjob/"
ZERO = dt.timedelta(0)


@pytest.fixture
def superuser(client: Client) -> Client:
    return login_superuser(client)


def failed_in_search(subject: str) -> int:
    """An item that failed for good in group "search" (and is still ready in "email")."""
    item = FanoutJob.queue.push(subject=subject)
    search = FanoutJob.queue.group("search")
    for attempt in (1, 2):
        (job,) = search.pop_batch(1)
        search.fail(job, f"ValueError: {subject} attempt {attempt}", delay=ZERO)
    return item


def action(client: Client, name: str, ids: list[int], url: str, **extra: Any) -> Any:
    data = {"action": name, "_selected_action": [str(i) for i in ids], "index": "0", **extra}
    return client.post(url, data, follow=True)


def test_the_list_shows_the_chosen_groups_states(superuser: Client) -> None:
    item = failed_in_search("mail")
    email = superuser.get(CHANGELIST)
    assert email.status_code == 200
    assert email.context["cl"].result_count == 1
    (row,) = email.context["cl"].result_list
    assert row.q_state == State.READY and row.q_last_error is None
    search = superuser.get(f"{CHANGELIST}?group=search")
    (row,) = search.context["cl"].result_list
    assert row.pk == item and row.q_state == State.FAILED
    assert "mail attempt 2" in search.content.decode()
    assert search.context["queue_stats"]["failed"] == 1
    assert email.context["queue_stats"]["failed"] == 0
    failed = superuser.get(f"{CHANGELIST}?group=search&state=failed")
    assert [r.pk for r in failed.context["cl"].result_list] == [item]
    assert superuser.get(f"{CHANGELIST}?group=email&state=failed").context["cl"].result_count == 0


def test_an_item_page_renders(superuser: Client) -> None:
    item = failed_in_search("page")
    page = superuser.get(f"{CHANGELIST}{item}/change/")
    assert page.status_code == 200


def test_retry_acts_on_the_chosen_group(superuser: Client) -> None:
    item = failed_in_search("retry")
    response = action(superuser, "retry_items", [item], f"{CHANGELIST}?group=search")
    assert "1 item(s) back to ready" in response.content.decode()
    assert FanoutJob.queue.group("search").stats()["failed"] == 0
    assert FanoutJob.queue.group("search").count() == 1


def test_cancel_and_set_priority_act_on_the_chosen_group(superuser: Client) -> None:
    item = FanoutJob.queue.push(subject="cancel")
    response = action(superuser, "cancel_items", [item], f"{CHANGELIST}?group=email")
    assert "1 cancelled" in response.content.decode()
    assert FanoutJob.queue.group("email").stats()["cancelled"] == 1
    assert FanoutJob.queue.group("search").stats()["ready"] == 1
    action(superuser, "set_priority", [item], f"{CHANGELIST}?group=search", priority="7")
    (row,) = FanoutJob.queue.group("search").items()
    assert row.priority == 7


def test_delete_removes_the_items_from_every_group(superuser: Client) -> None:
    item = FanoutJob.queue.push(subject="delete")
    data = {"action": "delete_selected", "_selected_action": [str(item)], "post": "yes"}
    superuser.post(f"{CHANGELIST}?group=search", data, follow=True)
    assert not FanoutJob.objects.filter(pk=item).exists()
    for group in ("email", "search"):
        assert FanoutJob.queue.group(group).count() == 0


def test_the_overview_has_a_row_per_group(superuser: Client) -> None:
    failed_in_search("overview")
    page = superuser.get("/admin/dbqueue_django/queueoverview/").content.decode()
    assert "fanout jobs [email]" in page and "fanout jobs [search]" in page
    assert f"{CHANGELIST}?group=search&amp;state=failed" in page


def test_an_item_page_shows_and_acts_on_one_group(superuser: Client) -> None:
    item = failed_in_search("buttons")
    page = superuser.get(f"{CHANGELIST}{item}/change/?_changelist_filters=group%3Dsearch")
    body = page.content.decode()
    assert "consumer group search" in body and 'name="_retry"' in body
    assert "_changelist_filters=group%3Dsearch" in body  # the buttons keep the group
    retried = superuser.post(
        f"{CHANGELIST}{item}/retry/?_changelist_filters=group%3Dsearch", follow=True
    )
    assert retried.status_code == 200
    assert FanoutJob.queue.group("search").count("ready") == 1
    # The first group, email, still has it ready: its page offers Cancel, not Retry.
    email = superuser.get(f"{CHANGELIST}{item}/change/").content.decode()
    assert "consumer group email" in email and 'name="_cancel"' in email
    assert 'name="_retry"' not in email


def test_an_item_page_opens_on_a_group_that_holds_the_item(superuser: Client) -> None:
    item = FanoutJob.queue.push(subject="only search")
    email = FanoutJob.queue.group("email")
    email.ack(email.pop_batch(1))  # email is done with it: only search holds it
    page = superuser.get(f"{CHANGELIST}{item}/change/", follow=True)
    assert page.status_code == 200
    assert page.redirect_chain[-1][0].endswith("_changelist_filters=group%3Dsearch")
    assert "consumer group search" in page.content.decode()
    FanoutJob.queue.group("search").purge()  # no group holds it: Django's "does not exist"
    gone = superuser.get(f"{CHANGELIST}{item}/change/", follow=True)
    assert gone.redirect_chain[-1][0] == "/admin/" and "exist" in gone.content.decode()
