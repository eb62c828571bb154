"""The queue admin's lists, on PostgreSQL and SQLite: search by id and error text, the filters
by error class and by a task's queue, the date hierarchy on when items failed, and the
overview's filter by queue."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connections
from django.test import Client, override_settings
from django.utils import timezone

from tests.django.admin_items import (
    FAILED_TICKS,
    OVERVIEW,
    PINGS,
    TASKS,
    TICKS,
    failed_task,
    failed_tick,
)
from tests.django.admin_items import failed_ping as failed
from tests.django.admin_users import login_superuser
from tests.django.testapp.models import Ping, Tick
from tests.django.tracebacks import chained, stored

# Transactional: a ring's rolled-back push still spends its number (see test_ring_admin.py).
pytestmark = [
    pytest.mark.django,
    pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
]


class SmtpDownError(Exception):
    """An exception outside the builtins: its traceback names it with its module."""


@pytest.fixture
def superuser(routed: str, client: Client) -> Client:
    return login_superuser(client)


def shown(response: Any) -> list[int]:
    return sorted(int(obj.id) for obj in response.context["cl"].result_list)


def choices(response: Any, title: str) -> list[str]:
    (spec,) = [s for s in response.context["cl"].filter_specs if s.title == title]
    return [str(c["display"]) for c in spec.choices(response.context["cl"])]


# -- search -------------------------------------------------------------------------------------


def test_search_by_id(superuser: Client) -> None:
    ids = Ping.queue.push_many([{"message": f"m{i}"} for i in range(12)])
    response = superuser.get(PINGS, {"q": str(ids[10])})
    assert shown(response) == [ids[10]]  # not ids[1], whose id merely starts the same


def test_search_by_error_text(superuser: Client) -> None:
    refused = failed("a", stored(ConnectionRefusedError(111, "smtp.example.com:587")))
    failed("b", stored(ValueError("bad address")))
    Ping.queue.push(message="smtp.example.com")  # the payload is not searched
    assert shown(superuser.get(PINGS, {"q": "smtp.example"})) == [refused]
    assert shown(superuser.get(PINGS, {"q": "no such text"})) == []


def test_search_in_a_ring_and_its_failed_messages(superuser: Client) -> None:
    dead = failed_tick("DEAD", stored(LookupError("not in the ledger")))
    numbers = Tick.queue.push_many([{"symbol": s, "price": 1} for s in ("A", "B")])
    assert shown(superuser.get(FAILED_TICKS, {"q": "ledger"})) == [dead]
    assert shown(superuser.get(FAILED_TICKS, {"q": str(dead)})) == [dead]
    response = superuser.get(TICKS, {"q": str(numbers[1])})
    assert [t.seq for t in response.context["cl"].result_list] == [numbers[1]]


# -- the error class ------------------------------------------------------------------------------


def test_filter_by_error_class(superuser: Client) -> None:
    value = failed("v", stored(ValueError("bad")))
    smtp = failed("s", stored(SmtpDownError("try later")))
    chain = failed("c", chained(KeyError("first"), RuntimeError("then this")))
    written = failed("w", "gave up: the address bounced")  # no class named
    Ping.queue.push(message="ready")
    response = superuser.get(PINGS)
    smtp_class = f"{__name__}.SmtpDownError"
    assert choices(response, "error class") == ["All", "RuntimeError", "ValueError", smtp_class]
    assert shown(superuser.get(PINGS, {"error_class": "ValueError"})) == [value]
    assert shown(superuser.get(PINGS, {"error_class": smtp_class})) == [smtp]
    assert shown(superuser.get(PINGS, {"error_class": "RuntimeError"})) == [chain]
    # A chained exception's cause is found too.
    assert shown(superuser.get(PINGS, {"error_class": "KeyError"})) == [chain]
    assert written not in shown(superuser.get(PINGS, {"error_class": "gave"}))


def test_a_value_that_is_no_class_name_filters_nothing(superuser: Client) -> None:
    ids = [failed("a", stored(ValueError("x"))), Ping.queue.push(message="b")]
    assert shown(superuser.get(PINGS, {"error_class": ".*"})) == sorted(ids)


def test_filter_failed_ring_messages_by_error_class(superuser: Client) -> None:
    lookup = failed_tick("L", stored(LookupError("missing")))
    value = failed_tick("V", stored(ValueError("bad")))
    response = superuser.get(FAILED_TICKS)
    assert choices(response, "error class") == ["All", "LookupError", "ValueError"]
    assert shown(superuser.get(FAILED_TICKS, {"error_class": "ValueError"})) == [value]
    assert shown(superuser.get(FAILED_TICKS, {"error_class": "LookupError"})) == [lookup]


# -- the date hierarchy ---------------------------------------------------------------------------


def hierarchy(on: str, day: Any) -> dict[str, str]:
    return {f"{on}__year": str(day.year), f"{on}__month": str(day.month),
            f"{on}__day": str(day.day)}  # fmt: skip


def test_failed_items_by_the_day_they_failed(superuser: Client) -> None:
    item_id = failed("f")
    today = timezone.localdate()
    response = superuser.get(PINGS, {"state": "failed", **hierarchy("queue_meta__run_at", today)})
    assert response.context["cl"].date_hierarchy == "queue_meta__run_at"
    assert shown(response) == [item_id]
    other = today.replace(year=today.year - 1)
    assert shown(superuser.get(PINGS, hierarchy("queue_meta__run_at", other))) == []


def test_failed_ring_messages_by_the_day_they_failed(superuser: Client) -> None:
    number = failed_tick("DEAD")
    today = timezone.localdate()
    response = superuser.get(FAILED_TICKS, hierarchy("failed_at", today))
    assert response.context["cl"].date_hierarchy == "failed_at"
    assert shown(response) == [number]


# -- a time that has no local time ----------------------------------------------------------------

#: How each database writes 9999-12-31 23:00 UTC (dbqueue's SQLite times: UTC, no offset).
NEAR_9999 = {"default": "9999-12-31 23:00:00+00", "sqlite": "9999-12-31 23:00:00.000000"}


@override_settings(TIME_ZONE="Pacific/Kiritimati")  # UTC+14: there it is year 10000
def test_a_run_at_near_9999_written_outside_dbqueue_is_shown_as_stored(
    superuser: Client, routed: str
) -> None:
    """A push refuses a run_at past MAX_RUN_AT; SQL outside dbqueue can still write one. The
    list, its date drill-down and the item's page open (they answered 500, OverflowError),
    and show that time as it is stored, in UTC."""
    far, near = Ping.queue.push_many([{"message": "far"}, {"message": "near"}])
    with connections[routed].cursor() as cursor:
        cursor.execute(
            f'UPDATE "{Ping.queue.spec.meta_table}" SET run_at = %s WHERE id = %s',
            [NEAR_9999[routed], far],
        )
    as_stored = "Dec. 31, 9999, 11 p.m. UTC"
    response = superuser.get(PINGS)
    assert response.status_code == 200
    assert shown(response) == [far, near]
    assert as_stored in response.content.decode()
    page = superuser.get(f"{PINGS}{far}/change/")
    assert page.status_code == 200
    assert as_stored in page.content.decode()
    # Django's drill-down into 9999 would end its range in year 10000: the list opens
    # without it, as after any lookup it cannot run.
    drilled = superuser.get(PINGS, {"queue_meta__run_at__year": "9999"})
    assert (drilled.status_code, drilled["Location"]) == (302, f"{PINGS}?e=1")
    assert superuser.get(PINGS, {"state": "scheduled"}).status_code == 200


# -- tasks and the overview: by queue -------------------------------------------------------------


def test_tasks_by_queue_name(superuser: Client) -> None:
    made = {
        "emails": failed_task("emails", stored(SmtpDownError("later"))),
        "default": failed_task("default", stored(ValueError("bad"))),
    }
    assert choices(superuser.get(TASKS), "queue") == ["All", "default", "emails"]
    for name, task_id in made.items():
        assert shown(superuser.get(TASKS, {"queue_name": name})) == [task_id]
    both = superuser.get(TASKS, {"queue_name": "emails", "error_class": "ValueError"})
    assert shown(both) == []  # the filters combine


def test_the_overview_by_queue(superuser: Client) -> None:
    failed("f")
    response = superuser.get(OVERVIEW, {"queue": "testapp.ping"})
    assert [row["label"] for row in response.context["rows"]] == ["Testapp / pings"]
    chosen = [c["display"] for c in response.context["queue_choices"] if c["selected"]]
    assert chosen == ["Testapp / pings"]
    page = response.content.decode()
    assert '<a href="?queue=testapp.tick">Testapp / ticks</a>' in page
    everything = superuser.get(OVERVIEW, {"queue": "no.such"}).context["rows"]
    assert len(everything) == len(superuser.get(OVERVIEW).context["rows"]) > 1


# -- the action bar -------------------------------------------------------------------------------


def test_the_priority_box_has_no_label_beside_it(superuser: Client) -> None:
    response = superuser.get(PINGS)
    field = response.context["action_form"]["priority"]
    assert field.label == ""
    assert 'placeholder="priority"' in str(field) and 'aria-label="Priority"' in str(field)
    assert "<label>Priority" not in response.content.decode()
