"""The Django executor's statement preparation: dbqueue's statements are prepared on Django's
PostgreSQL connection, nothing else is, and a project's explicit choice is left alone."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connections
from django.test.utils import override_settings

from dbqueue_django.executor import NEVER_AUTO_PREPARE, wants_prepared_statements
from tests.django.testapp.models import Job

pytestmark = [
    pytest.mark.django,
    pytest.mark.postgresql,
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def fresh_connection() -> Iterator[None]:
    """A new raw connection for the test, and again after it (settings it changed go away)."""
    connections["default"].close()
    yield
    connections["default"].close()


def prepared_statements() -> list[str]:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.usefixtures("fresh_connection")
def test_dbqueue_statements_are_prepared_and_django_queries_are_not() -> None:
    for n in range(3):
        Job.queue.push(name=f"t{n}", n=n)
    for _ in range(10):  # more than psycopg's default threshold of 5
        list(Job.objects.all())
    raw = connections["default"].connection
    assert raw.prepare_threshold == NEVER_AUTO_PREPARE
    statements = sorted(prepared_statements())
    # dbqueue's push and its NOTIFY; none of the ORM's SELECTs.
    assert len(statements) == 2
    assert statements[0].startswith("SELECT pg_notify(")
    assert statements[1].startswith('WITH d AS (\n    INSERT INTO "testapp_job"')


@pytest.mark.usefixtures("fresh_connection")
@override_settings(DBQUEUE_PREPARED_STATEMENTS=False)
def test_the_setting_turns_preparing_off() -> None:
    Job.queue.push(name="t", n=1)
    assert connections["default"].connection.prepare_threshold is None
    assert prepared_statements() == []


@pytest.mark.usefixtures("fresh_connection")
def test_an_explicit_prepare_threshold_is_left_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    options = connections["default"].settings_dict["OPTIONS"]
    monkeypatch.setitem(options, "prepare_threshold", None)
    assert not wants_prepared_statements(connections["default"])
    Job.queue.push(name="t", n=1)
    assert connections["default"].connection.prepare_threshold is None
    assert prepared_statements() == []
