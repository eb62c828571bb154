"""System checks of ring queue declarations: capacity required on a RingQueueModel and refused
on a QueueModel (keep_done the other way round), payload fields a ring cannot hold, and
(``check --database``) a slot table whose size differs from the declared capacity."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.apps.registry import Apps
from django.core import checks
from django.db import connections, models

from dbqueue import WhenFull
from dbqueue_django.checks import check_ring_capacity
from dbqueue_django.models import QueueModel, RingQueueModel
from tests.django.test_checks import dbqueue_errors, isolated, only_error
from tests.django.testapp.models import Tick

pytestmark = pytest.mark.django
__all__ = ["isolated"]  # the fixture, shared with the split queue's checks


def declare(base: type[Any], name: str, options: dict[str, Any] | None = None, **fields: Any):
    """A model named ``name`` in the isolated test app, with ``fields`` and QueueOptions."""
    attrs: dict[str, Any] = {
        "__module__": __name__,
        "Meta": type("Meta", (), {"app_label": "testapp"}),
        **fields,
    }
    if options is not None:
        attrs["QueueOptions"] = type("QueueOptions", (), options)
    return type(name, (base,), attrs)


def test_a_valid_ring_has_no_errors(isolated: Apps) -> None:
    declare(
        RingQueueModel,
        "Quote",
        {"capacity": 1024, "push_timeout": timedelta(seconds=1), "max_attempts": 3},
        symbol=models.CharField(max_length=12),
        at=models.DateTimeField(null=True),
    )
    assert dbqueue_errors(isolated) == []


def test_a_ring_needs_a_capacity(isolated: Apps) -> None:
    ring = declare(RingQueueModel, "Unbounded", {"max_attempts": 3}, n=models.IntegerField())
    msg = only_error(isolated, ring).msg
    assert msg.startswith("testapp.Unbounded.QueueOptions: a ring queue needs capacity")


@pytest.mark.parametrize("capacity", [0, -1, True, "1024", 1 << 25])
def test_a_bad_capacity(isolated: Apps, capacity: object) -> None:
    ring = declare(RingQueueModel, "Odd", {"capacity": capacity}, n=models.IntegerField())
    assert "capacity must be an int between 1 and" in only_error(isolated, ring).msg


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"capacity": 64}, "capacity is an option of ring queues only"),
        ({"push_timeout": timedelta(1), "hole_timeout": timedelta(1)}, "are options of ring"),
    ],
)
def test_ring_options_are_refused_on_a_split_queue(
    isolated: Apps, options: dict[str, Any], named: str
) -> None:
    split = declare(QueueModel, "Split", options, n=models.IntegerField())
    msg = only_error(isolated, split).msg
    assert named in msg and "RingQueueModel" in msg


@pytest.mark.parametrize("keep_done", [True, False])
def test_keep_done_is_refused_on_a_ring(isolated: Apps, keep_done: bool) -> None:
    options = {"capacity": 8, "keep_done": keep_done}
    ring = declare(RingQueueModel, "Keeper", options, n=models.IntegerField())
    msg = only_error(isolated, ring).msg
    assert msg.startswith("testapp.Keeper.QueueOptions: keep_done is an option of split queues")
    assert "reuses its slots" in msg and "QueueModel" in msg


@pytest.mark.parametrize(
    ("field", "says"),
    [
        (models.ForeignKey("auth.User", on_delete=models.CASCADE), "cannot hold a relation"),
        (models.CharField(max_length=5, unique=True), "has unique=True"),
        (models.SlugField(), "has db_index=True"),
        (models.IntegerField(db_index=True), "stop PostgreSQL's HOT updates"),
    ],
)
def test_payload_fields_a_ring_cannot_hold(isolated: Apps, field: Any, says: str) -> None:
    ring = declare(RingQueueModel, "Held", {"capacity": 8}, payload=field)
    msg = only_error(isolated, ring).msg
    assert "'payload'" in msg and says in msg


def test_a_payload_field_named_like_a_failed_column(isolated: Apps) -> None:
    ring = declare(RingQueueModel, "Clash", {"capacity": 8}, failed_at=models.DateTimeField())
    assert "'failed_at' uses a name the failed table needs" in only_error(isolated, ring).msg


@pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])
def test_a_slot_table_of_another_size_is_a_database_warning(alias: str) -> None:
    assert check_ring_capacity(databases=[alias]) == []
    with connections[alias].cursor() as cursor:
        cursor.execute("DELETE FROM testapp_tick WHERE slot >= 6")
    (warning,) = check_ring_capacity(databases=[alias])
    assert (warning.id, warning.level, warning.obj) == ("dbqueue.W001", checks.WARNING, Tick)
    assert "declares capacity 8" in warning.msg and "6 slots" in warning.msg
    assert f"(database {alias!r})" in warning.msg and "makemigrations" in (warning.hint or "")


def test_when_full_is_declared_like_the_other_options(isolated: Apps) -> None:
    ring = declare(RingQueueModel, "Spilling", {"capacity": 8, "when_full": "raise"},
                   n=models.IntegerField())  # fmt: skip
    assert dbqueue_errors(isolated) == []
    assert ring.queue.spec.options.when_full_mode is WhenFull.RAISE


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"capacity": 8, "when_full": "block"}, "when_full must be one of 'spill', 'raise'"),
        (
            {"capacity": 8, "when_full": "spill", "push_timeout": timedelta(seconds=1)},
            "push_timeout applies to when_full='wait' only",
        ),
    ],
)
def test_a_bad_when_full(isolated: Apps, options: dict[str, Any], says: str) -> None:
    ring = declare(RingQueueModel, "Badly", options, n=models.IntegerField())
    assert says in only_error(isolated, ring).msg
