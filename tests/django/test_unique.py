"""Unique items (issue 22 §2) through the Django front: the declaration (fields by name, a
ForeignKey's by its name or attname) and the meta model it makes. What ``makemigrations``
writes is in test_unique_migrations.py."""

from __future__ import annotations

from typing import Any

import pytest
from django.apps.registry import Apps
from django.db import models

from dbqueue.errors import InvalidSpec
from dbqueue.unique import UniqueScope
from dbqueue_django.models import QueueModel, TaskRun
from dbqueue_django.queue import DjangoQueue
from dbqueue_django.spec import has_unique_keys, spec_for_model
from tests.django.testapp.models import Ping, QueuedUniqueJob, StoredUniqueJob, UniqueJob

pytestmark = [
    pytest.mark.django,
    pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
]


@pytest.fixture
def queue(alias: str) -> DjangoQueue[UniqueJob]:
    return UniqueJob.queue.using(alias)


# -- the declaration ------------------------------------------------------------------------


def isolated_model(name: str, options: dict[str, Any]) -> type[Any]:
    """A queue model with a ForeignKey, declared in a registry of its own (never migrated)."""

    registry = Apps(["tests.django.testapp"])
    attrs: dict[str, Any] = {
        "__module__": __name__,
        "Meta": type("Meta", (), {"app_label": "testapp", "apps": registry}),
        "QueueOptions": type("QueueOptions", (), options),
        # To a model whose key is a stored kind (an AutoField key is not one).
        "order": models.ForeignKey(TaskRun, on_delete=models.CASCADE, db_constraint=False),
        "note": models.TextField(default=""),
    }
    return type(name, (QueueModel,), attrs)


def test_declared_fields_are_the_cores_columns() -> None:
    assert UniqueJob.queue.spec.options.unique == ("account", "kind")
    assert UniqueJob.queue.spec.options.unique_scope_mode is UniqueScope.UNFINISHED
    assert QueuedUniqueJob.queue.spec.options.unique_scope is UniqueScope.QUEUED
    assert StoredUniqueJob.queue.spec.options.unique == ()
    assert all(has_unique_keys(m) for m in (UniqueJob, QueuedUniqueJob, StoredUniqueJob))
    assert not has_unique_keys(Ping)


@pytest.mark.parametrize("name", ["order", "order_id"])
def test_a_foreign_key_is_named_by_its_name_or_attname(name: str) -> None:
    model = isolated_model("Purchase", {"unique": (name, "note")})
    assert spec_for_model(model).options.unique == ("order_id", "note")
    meta = model.queue_meta_model._meta
    assert meta.get_field("unique_key").null
    (constraint,) = meta.constraints
    assert constraint.fields == ("unique_key",)


def test_an_unknown_name_is_an_error_that_names_the_model() -> None:
    model = isolated_model("Refund", {"unique": ("order", "amount")})
    # The class is made (the system check reports the error), without a key column.
    assert not has_unique_keys(model)
    with pytest.raises(InvalidSpec, match=r"testapp\.Refund\.QueueOptions: unique names 'amount'"):
        spec_for_model(model)
