"""Cancellation through Django: the admin's Cancel action and button, the state filter and
counts, ``manage.py cancelqueueitem`` (a real process), and ``cancel_requested`` on an
instance."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.test import Client

from dbqueue.message import State
from tests.django.admin_items import PINGS
from tests.django.admin_users import login_superuser, staff_with
from tests.django.commands import assert_one_line_error, run_command
from tests.django.testapp.models import Ping, RingJob

pytestmark = [
    pytest.mark.django,
    pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
]


@pytest.fixture
def superuser(routed: str, client: Client) -> Client:
    return login_superuser(client)


def state_of(item_id: int) -> State:
    return State(Ping.queue.items().get(pk=item_id).state)  # type: ignore[attr-defined]


def action(client: Client, name: str, ids: list[int]) -> Any:
    data = {"action": name, "_selected_action": [str(i) for i in ids], "index": "0"}
    return client.post(PINGS, data, follow=True)


def test_the_cancel_action_cancels_ready_items_and_asks_leased_ones_to_stop(
    superuser: Client,
) -> None:
    acked, leased, waiting = Ping.queue.push_many([{"message": m} for m in "alw"])
    assert [p.id for p in Ping.queue.pop_batch(2)] == [acked, leased]
    Ping.queue.ack_by_id([acked])
    later = Ping.queue.push(message="s", delay=dt.timedelta(hours=1))
    response = action(superuser, "cancel_items", [later, leased, waiting, acked])
    page = response.content.decode()
    assert "Cancel: 2 cancelled (will never run); 1 leased: cancellation requested" in page
    assert "no longer in the queue" not in page  # Django selects only the rows still there
    assert state_of(later) == state_of(waiting) == State.CANCELLED
    assert state_of(leased) == State.CANCELLING
    cancelled = superuser.get(PINGS, {"state": "cancelled"}).context["cl"].result_list
    assert sorted(p.id for p in cancelled) == sorted([later, waiting])
    counts = {c.label: c for c in superuser.get(PINGS).context["queue_counts"]}
    assert (counts["cancelled"].value, counts["cancelled"].url) == (2, "?state=cancelled")
    leased_list = superuser.get(PINGS, {"state": "leased"}).context["cl"].result_list
    assert [p.id for p in leased_list] == [leased]


def test_the_cancel_button_is_offered_until_the_item_finishes(superuser: Client) -> None:
    item_id = Ping.queue.push(message="b")
    page = superuser.get(f"{PINGS}{item_id}/change/").content.decode()
    assert f'value="Cancel" name="_cancel" formaction="{PINGS}{item_id}/cancel/"' in page
    response = superuser.post(f"{PINGS}{item_id}/cancel/", follow=True)
    assert response.redirect_chain == [(PINGS, 302)]
    assert "1 cancelled (will never run)" in response.content.decode()
    assert state_of(item_id) == State.CANCELLED
    page = superuser.get(f"{PINGS}{item_id}/change/").content.decode()
    assert "<h1>View cancelled ping</h1>" in page and 'name="_cancel"' not in page
    again = superuser.post(f"{PINGS}{item_id}/cancel/", follow=True).content.decode()
    assert "1 already cancelled" in again


def test_the_cancel_button_is_a_post_under_the_change_permission(
    routed: str, client: Client
) -> None:
    item_id = Ping.queue.push(message="guarded")
    staff = staff_with(client, "view_ping")
    page = staff.get(f"{PINGS}{item_id}/change/").content.decode()
    assert 'name="_cancel"' not in page
    assert staff.post(f"{PINGS}{item_id}/cancel/").status_code == 403
    browser = login_superuser(Client(enforce_csrf_checks=True))
    assert browser.get(f"{PINGS}{item_id}/cancel/").status_code == 405
    assert browser.post(f"{PINGS}{item_id}/cancel/").status_code == 403  # no CSRF token
    assert state_of(item_id) == State.READY


def test_a_handler_sees_cancel_requested_on_its_instance(alias: str) -> None:
    queue = Ping.queue.using(alias)
    queue.push(message="long")
    (job,) = queue.pop_batch(1)
    assert job.cancel_requested is False
    assert queue.cancel([job.id]) == {job.id: "requested"}
    assert job.cancel_requested is True
    queue.ack([job])
    assert State(queue.items().get(pk=job.id).state) == State.CANCELLED  # type: ignore[attr-defined]


def test_cancelqueueitem_prints_each_outcome(alias: str) -> None:
    queue = Ping.queue.using(alias)
    ready, leased = queue.push_many([{"message": "a"}, {"message": "b"}])
    queue.pop_batch(1)
    done = run_command(
        "cancelqueueitem", "testapp.Ping", str(ready), str(leased), "999999", "--database", alias
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"{ready}: leased: cancellation requested (recorded when its worker settles it)",
        f"{leased}: cancelled: it will never run",
        "999999: no such item",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["testapp.Ping", "x1"], "not an item id: 'x1' (ids are integers)"),
        (["testapp.Ping", "0"], "not an item id: '0' (ids are positive)"),
        (["testapp.Nope", "1"], "'testapp.Nope' is not an installed model"),
        (["testapp.Ping", "1", "--database", "nope"], "no database alias 'nope'"),
        (["testapp.RingJob", "1"], "delivers in push order and has no cancellation"),
    ],
)
def test_cancelqueueitem_refuses_bad_input_in_one_line(args: list[str], message: str) -> None:
    assert RingJob  # the ring's table exists in the test database
    assert_one_line_error(run_command("cancelqueueitem", *args), message)
