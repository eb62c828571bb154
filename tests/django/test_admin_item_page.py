"""A queue item's page in the admin, on PostgreSQL and SQLite: read-only and titled after the
item's state, with Retry (a POST with Django's CSRF token, under the change permission) and
Delete for that one item, for a split queue, a ring's failed messages, and the tasks."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.test import Client

from dbqueue.message import State
from dbqueue_django.models import TaskItem
from tests.django.admin_items import FAILED_TICKS, PINGS, TASKS, TICKS, failed_task, failed_tick
from tests.django.admin_items import failed_ping as failed
from tests.django.admin_users import login_superuser, staff_with
from tests.django.testapp.models import Ping, Tick

# Transactional: a ring's rolled-back push still spends its number (see test_ring_admin.py).
pytestmark = [
    pytest.mark.django,
    pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
]

FILTERS = "?_changelist_filters=state%3Dfailed"  # the page opened from the failed items


@pytest.fixture
def superuser(routed: str, client: Client) -> Client:
    return login_superuser(client)


def state_of(item_id: int) -> tuple[State, int]:
    item = Ping.queue.items().get(pk=item_id)
    return item.state, item.attempts  # type: ignore[attr-defined]


def retry_button(page: str, url: str) -> bool:
    return f'value="Retry" name="_retry" formaction="{url}"' in page


# -- a split queue ------------------------------------------------------------------------------


def test_a_failed_item_is_viewed_not_changed(superuser: Client) -> None:
    item_id = failed("broken")
    response = superuser.get(f"{PINGS}{item_id}/change/{FILTERS}")
    page = response.content.decode()
    assert response.context["title"] == "View failed ping"
    assert "<h1>View failed ping</h1>" in page and "Change ping" not in page
    assert 'name="_save"' not in page and 'name="message"' not in page
    assert retry_button(page, f"{PINGS}{item_id}/retry/{FILTERS}")
    assert f'href="{PINGS}{item_id}/delete/{FILTERS}" class="deletelink">Delete<' in page


def test_an_item_not_failed_has_no_retry_button(superuser: Client) -> None:
    ready = Ping.queue.push(message="r")
    later = Ping.queue.push(message="s", delay=dt.timedelta(hours=1))
    page = superuser.get(f"{PINGS}{ready}/change/").content.decode()
    assert "<h1>View ready ping</h1>" in page
    assert 'name="_retry"' not in page
    assert 'class="deletelink">Delete<' in page
    page = superuser.get(f"{PINGS}{later}/change/").content.decode()
    assert "<h1>View scheduled ping</h1>" in page


def test_retry_puts_the_item_back_and_returns_to_the_list(superuser: Client) -> None:
    item_id, other = failed("again"), failed("other")
    response = superuser.post(f"{PINGS}{item_id}/retry/{FILTERS}")
    assert response.status_code == 302
    assert response["Location"] == f"{PINGS}?state=failed"
    assert state_of(item_id) == (State.READY, 0)
    assert state_of(other)[0] == State.FAILED  # this one item only
    page = superuser.get(response["Location"]).content.decode()
    assert "1 item(s) back to ready." in page


def test_retry_of_an_item_retried_meanwhile_leaves_it_as_it_is(superuser: Client) -> None:
    item_id = failed("twice")
    Ping.queue.retry([item_id])
    assert [item.id for item in Ping.queue.pop_batch(1)] == [item_id]  # leased again
    response = superuser.post(f"{PINGS}{item_id}/retry/", follow=True)
    assert "0 item(s) back to ready (1 not failed, left as they were)." in (
        response.content.decode()
    )
    assert state_of(item_id) == (State.LEASED, 1)


def test_retry_of_a_deleted_item_says_so(superuser: Client) -> None:
    response = superuser.post(f"{PINGS}999999/retry/", follow=True)
    assert response.redirect_chain == [(PINGS, 302)]
    (message,) = [str(m) for m in response.context["messages"]]
    assert message == 'Ping with ID "999999" does not exist. Perhaps it was deleted?'


def test_retry_is_a_post_with_the_csrf_token(routed: str) -> None:
    item_id = failed("guarded")
    browser = login_superuser(Client(enforce_csrf_checks=True))
    assert browser.get(f"{PINGS}{item_id}/retry/").status_code == 405
    assert browser.post(f"{PINGS}{item_id}/retry/").status_code == 403  # no token
    assert state_of(item_id)[0] == State.FAILED
    page = browser.get(f"{PINGS}{item_id}/change/")
    token = page.context["csrf_token"]
    response = browser.post(f"{PINGS}{item_id}/retry/", {"csrfmiddlewaretoken": str(token)})
    assert response.status_code == 302
    assert state_of(item_id)[0] == State.READY


def test_retry_needs_the_change_permission(routed: str, client: Client) -> None:
    item_id = failed("mine")
    staff = staff_with(client, "view_ping")
    page = staff.get(f"{PINGS}{item_id}/change/").content.decode()
    assert "<h1>View failed ping</h1>" in page
    assert 'name="_retry"' not in page and 'class="deletelink"' not in page
    assert staff.post(f"{PINGS}{item_id}/retry/").status_code == 403
    assert staff.post(f"{PINGS}{item_id}/delete/", {"post": "yes"}).status_code == 403
    assert state_of(item_id)[0] == State.FAILED


def test_the_page_itself_takes_no_post(superuser: Client) -> None:
    item_id = failed("kept")
    response = superuser.post(f"{PINGS}{item_id}/change/", {"message": "changed"})
    assert response.status_code == 405
    assert Ping.objects.get(pk=item_id).message == "kept"


def test_delete_asks_then_deletes_and_returns_to_the_list(superuser: Client) -> None:
    item_id = failed("gone")
    confirm = superuser.get(f"{PINGS}{item_id}/delete/{FILTERS}")
    assert "Are you sure" in confirm.content.decode()
    response = superuser.post(f"{PINGS}{item_id}/delete/{FILTERS}", {"post": "yes"})
    assert response["Location"] == f"{PINGS}?state=failed"
    assert "was deleted successfully" in superuser.get(response["Location"]).content.decode()
    assert not Ping.objects.filter(pk=item_id).exists()
    assert not Ping.queue_meta_model.objects.filter(pk=item_id).exists()


# -- a ring ---------------------------------------------------------------------------------------


def test_a_failed_ring_message_is_viewed_and_retried(superuser: Client) -> None:
    number = failed_tick("DEAD")
    url = f"{FAILED_TICKS}{number}/"
    page = superuser.get(f"{url}change/").content.decode()
    assert "<h1>View failed tick</h1>" in page and "Change failed tick" not in page
    assert retry_button(page, f"{url}retry/")
    assert 'class="deletelink">Delete<' in page
    response = superuser.post(f"{url}retry/", follow=True)
    assert response.redirect_chain == [(FAILED_TICKS, 302)]
    assert "1 message(s) pushed again." in response.content.decode()
    (item,) = Tick.queue.items("ready")
    assert (item.symbol, item.attempts) == ("DEAD", 0)


def test_a_waiting_ring_message_and_a_slot_have_no_retry(superuser: Client) -> None:
    (number,) = Tick.queue.push_many([{"symbol": "W", "price": Decimal(1)}])
    (item,) = Tick.queue.pop_batch(1)
    Tick.queue.fail(item, "later", delay=dt.timedelta(hours=1))  # waits out of the ring
    page = superuser.get(f"{FAILED_TICKS}{number}/change/").content.decode()
    assert "<h1>View waiting tick</h1>" in page and 'name="_retry"' not in page
    (ready,) = Tick.queue.push_many([{"symbol": "R", "price": Decimal(1)}])
    page = superuser.get(f"{TICKS}{ready % 8}/change/").content.decode()
    assert "<h1>View ready tick</h1>" in page and 'name="_retry"' not in page
    assert 'class="deletelink">Delete<' in page


def test_retry_of_a_ring_message_needs_the_change_permission(routed: str, client: Client) -> None:
    number = failed_tick("DEAD")
    staff = staff_with(client, "view_tickfailed")
    assert 'name="_retry"' not in staff.get(f"{FAILED_TICKS}{number}/change/").content.decode()
    assert staff.post(f"{FAILED_TICKS}{number}/retry/").status_code == 403
    assert Tick.failed_model.objects.filter(pk=number, state=State.FAILED).exists()


# -- a task ---------------------------------------------------------------------------------------


def test_a_failed_task_shows_its_attempts_like_any_item_and_its_runs(superuser: Client) -> None:
    item_id = failed_task("emails", "Traceback ...\nValueError: why", runs=2)
    response = superuser.get(f"{TASKS}{item_id}/change/")
    page = response.content.decode()
    assert "<h1>View failed task</h1>" in page
    assert retry_button(page, f"{TASKS}{item_id}/retry/")
    fields = {
        line.field["label"]: line.contents()
        for fieldset in response.context["adminform"]
        for row in fieldset
        for line in row
    }
    # The item's attempts, as on every queue's page (max_attempts is 1), and the runs that
    # Django's TaskResult.attempts counts, the one before the last retry included.
    assert (fields["attempts"], fields["runs (retries included)"]) == ("1", "2")
    superuser.post(f"{TASKS}{item_id}/retry/")
    item = TaskItem.queue.items().get(pk=item_id)
    assert (item.state, item.attempts) == (State.READY, 0)  # type: ignore[attr-defined]
