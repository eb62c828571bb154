"""The schedules admin (dbqueue_django.schedules_admin) through Django's test client, on
PostgreSQL and SQLite: the workers' schedule rows listed and shown, never added, changed or
deleted."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib import admin
from django.test import Client
from pytest_django.fixtures import Settings

from dbqueue_django.schedule_rows import QueueSchedule
from dbqueue_django.schedules_admin import QueueScheduleAdmin, register_schedules
from tests.django.admin_users import login_superuser, staff_with
from tests.django.routing import OneDatabase

pytestmark = [pytest.mark.django, pytest.mark.django_db(databases=["default", "sqlite"])]

SCHEDULES = "/admin/dbqueue_django/queueschedule/"
#: 03:00 in Paris on 2026-11-27 (CET, UTC+1).
TICK = dt.datetime(2026, 11, 27, 2, 0, tzinfo=dt.UTC)


@pytest.fixture(
    params=[
        pytest.param("default", marks=pytest.mark.postgresql),
        pytest.param("sqlite", marks=pytest.mark.sqlite),
    ]
)
def alias(request: pytest.FixtureRequest, settings: Settings) -> str:
    """Every model (the schedule rows, the admin's users) on this database."""
    settings.DATABASE_ROUTERS = [OneDatabase(request.param)]
    return str(request.param)


def schedule_rows(alias: str) -> tuple[QueueSchedule, QueueSchedule]:
    """A schedule that ticked (in Paris) and one that never did."""
    nightly = QueueSchedule.objects.using(alias).create(
        name="nightly-report",
        queue="shop.Report@default",
        expression="0 3 * * *",
        timezone="Europe/Paris",
        since=TICK - dt.timedelta(days=3),
        last_tick=TICK,
        next_tick=TICK + dt.timedelta(days=1),
    )
    sweep = QueueSchedule.objects.using(alias).create(
        name="sweep-<sessions>",
        queue="shop.Cleanup@default",
        expression="*/5 * * * *",
        timezone="UTC",
        since=TICK,
        next_tick=TICK + dt.timedelta(minutes=5),
    )
    return nightly, sweep


def test_schedules_are_registered_read_only() -> None:
    assert isinstance(admin.site._registry[QueueSchedule], QueueScheduleAdmin)


def test_the_list_shows_each_schedule_with_its_ticks_in_its_zone(alias: str) -> None:
    schedule_rows(alias)
    superuser = login_superuser(Client())
    assert SCHEDULES in superuser.get("/admin/").content.decode()
    page = superuser.get(SCHEDULES).content.decode()
    for column in ("Name", "Queue", "Expression", "Timezone", "Last tick", "Next tick"):
        assert column in page
    assert "nightly-report" in page and "shop.Report@default" in page and "0 3 * * *" in page
    assert "2026-11-27 03:00:00 CET" in page and "2026-11-28 03:00:00 CET" in page
    assert "sweep-&lt;sessions&gt;" in page and "never" in page
    assert "2026-11-27 02:05:00 UTC" in page
    filtered = superuser.get(SCHEDULES, {"queue": "shop.Cleanup@default"}).content.decode()
    assert "sweep-&lt;sessions&gt;" in filtered and "nightly-report" not in filtered


def test_a_schedule_page_shows_it_read_only(alias: str) -> None:
    nightly, _ = schedule_rows(alias)
    superuser = login_superuser(Client())
    response = superuser.get(f"{SCHEDULES}{nightly.pk}/change/")
    page = response.content.decode()
    assert response.status_code == 200
    assert "View queue schedule" in page  # not "Change"
    assert 'name="_save"' not in page
    assert "Declared since:" in page and "2026-11-24 03:00:00 CET" in page


def test_nothing_can_be_added_changed_or_deleted(alias: str) -> None:
    nightly, _ = schedule_rows(alias)
    superuser = login_superuser(Client())
    assert superuser.get(f"{SCHEDULES}add/").status_code == 403
    assert superuser.get(f"{SCHEDULES}{nightly.pk}/delete/").status_code == 403
    change = superuser.post(f"{SCHEDULES}{nightly.pk}/change/", {"expression": "* * * * *"})
    assert change.status_code == 403
    delete = superuser.post(
        SCHEDULES, {"action": "delete_selected", "_selected_action": [nightly.pk]}
    )
    assert delete.status_code == 200  # the list again: there is no such action
    assert QueueSchedule.objects.using(alias).get(pk=nightly.pk).expression == "0 3 * * *"


def test_staff_need_the_view_permission(alias: str) -> None:
    schedule_rows(alias)
    assert staff_with(Client()).get(SCHEDULES).status_code == 403


def test_the_view_permission_shows_the_schedules(alias: str) -> None:
    schedule_rows(alias)
    viewer = staff_with(Client(), "view_queueschedule")
    assert "nightly-report" in viewer.get(SCHEDULES).content.decode()


def test_a_registration_of_the_project_is_left_alone() -> None:
    site = admin.AdminSite(name="custom")

    class Mine(QueueScheduleAdmin):
        pass

    site.register(QueueSchedule, Mine)
    register_schedules(site)
    assert isinstance(site._registry[QueueSchedule], Mine)
