"""The task results admin (dbqueue_django.tasks_admin) through Django's test client: listed,
filtered, searched and shown, never added, changed or deleted."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib import admin
from django.test import Client
from django.utils import timezone

from dbqueue_django.models import TaskRun
from dbqueue_django.tasks_admin import TaskResultAdmin, register_task_results
from tests.django import task_rows
from tests.django.admin_users import login_superuser, staff_with

pytestmark = [pytest.mark.django, pytest.mark.postgresql, pytest.mark.django_db]

RESULTS = "/admin/dbqueue_django/taskrun/"
HOUR = dt.timedelta(hours=1)


@pytest.fixture
def superuser(client: Client) -> Client:
    return login_superuser(client)


def test_task_results_are_registered_read_only() -> None:
    assert isinstance(admin.site._registry[TaskRun], TaskResultAdmin)


def test_the_index_lists_the_task_results(superuser: Client) -> None:
    page = superuser.get("/admin/").content.decode()
    assert "Task results" in page
    assert RESULTS in page


def test_the_list_shows_each_result(superuser: Client) -> None:
    ok = task_rows.result("default", "SUCCESSFUL", HOUR)
    failed = task_rows.result("default", "FAILED", HOUR)
    page = superuser.get(RESULTS).content.decode()
    assert "tests.django.testapp.tasks.add" in page
    for result in (ok, failed):
        assert f"{RESULTS}{result.pk}/change/" in page
    assert "SUCCESSFUL" in page and "FAILED" in page
    assert "1.000\N{NO-BREAK SPACE}s" in page  # how long it took (its last attempt)
    finished = timezone.localtime(ok.finished_at).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    assert finished in page  # to the millisecond


def test_the_status_filter_and_the_search(superuser: Client) -> None:
    ok = task_rows.result("default", "SUCCESSFUL", HOUR)
    failed = task_rows.result("default", "FAILED", HOUR)
    page = superuser.get(RESULTS, {"status": "FAILED"}).content.decode()
    assert f"{RESULTS}{failed.pk}/change/" in page
    assert f"{RESULTS}{ok.pk}/change/" not in page
    page = superuser.get(RESULTS, {"q": str(ok.pk)}).content.decode()
    assert f"{RESULTS}{ok.pk}/change/" in page
    assert f"{RESULTS}{failed.pk}/change/" not in page


def test_a_result_page_shows_everything_read_only(superuser: Client) -> None:
    result = task_rows.result("default", "SUCCESSFUL", HOUR)
    response = superuser.get(f"{RESULTS}{result.pk}/change/")
    page = response.content.decode()
    assert response.status_code == 200
    assert "View task result" in page  # not "Change"
    assert 'name="_save"' not in page
    assert f"{RESULTS}{result.pk}/delete/" not in page
    assert "<pre>[\n  1,\n  2\n]</pre>" in page  # args
    assert "<pre>3</pre>" in page  # the return value
    started = timezone.localtime(result.started_at).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    assert "Started at:" in page and started in page


def test_a_failed_result_shows_its_tracebacks_escaped_and_links_its_queue_item(
    superuser: Client,
) -> None:
    item_id = task_rows.failed_task("default", HOUR)
    TaskRun.objects.filter(pk=item_id).update(
        errors=[{"exception_class_path": "builtins.ValueError", "traceback": "ValueError: <b>x"}]
    )
    page = superuser.get(f"{RESULTS}{item_id}/change/").content.decode()
    assert "builtins.ValueError" in page
    assert '<pre class="dbqueue-traceback">ValueError: &lt;b&gt;x</pre>' in page
    assert f'href="/admin/dbqueue_django/taskitem/{item_id}/change/"' in page


def test_nothing_can_be_added_changed_or_deleted(superuser: Client) -> None:
    result = task_rows.result("default", "SUCCESSFUL", HOUR)
    assert superuser.get(f"{RESULTS}add/").status_code == 403
    assert superuser.get(f"{RESULTS}{result.pk}/delete/").status_code == 403
    change = superuser.post(f"{RESULTS}{result.pk}/change/", {"status": "FAILED"})
    assert change.status_code == 403
    delete = superuser.post(
        RESULTS, {"action": "delete_selected", "_selected_action": [str(result.pk)]}
    )
    assert delete.status_code == 200  # the list again: there is no such action
    assert TaskRun.objects.get(pk=result.pk).status == "SUCCESSFUL"
    assert 'value="delete_selected"' not in superuser.get(RESULTS).content.decode()


def test_staff_need_the_view_permission(client: Client) -> None:
    result = task_rows.result("default", "SUCCESSFUL", HOUR)
    assert staff_with(client).get(RESULTS).status_code == 403
    assert client.get(f"{RESULTS}{result.pk}/change/").status_code == 403


def test_the_view_permission_shows_the_results(client: Client) -> None:
    result = task_rows.result("default", "SUCCESSFUL", HOUR)
    viewer = staff_with(client, "view_taskrun")
    assert f"{RESULTS}{result.pk}/change/" in viewer.get(RESULTS).content.decode()
    assert viewer.get(f"{RESULTS}{result.pk}/change/").status_code == 200


def test_a_registration_of_the_project_is_left_alone() -> None:
    site = admin.AdminSite(name="custom")

    class Mine(TaskResultAdmin):
        pass

    site.register(TaskRun, Mine)
    register_task_results(site)
    assert isinstance(site._registry[TaskRun], Mine)
