"""What ``makemigrations`` writes for unique items: the autodetector's own output when a queue
model becomes unique (AddField + AddConstraint), changes its scope (RemoveConstraint +
AddConstraint) or stops being unique, and the migration applied to (and unapplied from) each
database, where the core's unique push then works on the migrated tables."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.apps.registry import Apps
from django.db import connections, models
from django.db.migrations import AddConstraint, AddField, Migration, RemoveConstraint, RemoveField
from django.db.migrations.autodetector import MigrationAutodetector
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.state import ModelState, ProjectState
from django.db.migrations.writer import MigrationWriter

from dbqueue.spec import QueueOptions, QueueSpec, index_name
from dbqueue.split import SplitQueue
from dbqueue_django.executor import DjangoExecutor
from dbqueue_django.models import QueueModel
from tests.django.testapp.models import Ping, UniqueJob

pytestmark = [
    pytest.mark.django,
    pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
]


def redeclared(model: type[Any], fields: dict[str, Any], options: dict[str, Any]) -> ModelState:
    """The migration state of the meta model that ``model`` would have, declared again (in a
    registry of its own) with these payload fields and ``QueueOptions``."""
    registry = Apps(["tests.django.testapp"])
    attrs: dict[str, Any] = {
        "__module__": __name__,
        "Meta": type("Meta", (), {"app_label": "testapp", "apps": registry}),
        "QueueOptions": type("QueueOptions", (), options),
        **fields,
    }
    again: Any = type(model.__name__, (QueueModel,), attrs)
    return ModelState.from_model(again.queue_meta_model)


def change(alias: str, meta: ModelState) -> tuple[ProjectState, Migration]:
    """The current migration state, and the migration makemigrations writes when the meta
    model's state becomes ``meta`` (the autodetector's own output)."""
    loader = MigrationLoader(connections[alias])
    before = loader.project_state()
    after = before.clone()
    after.models["testapp", meta.name_lower] = meta
    (migration,) = MigrationAutodetector(before, after).changes(graph=loader.graph)["testapp"]
    return before, migration


PING_FIELDS = {"message": models.TextField()}
UNIQUE_JOB_FIELDS = {
    "account": models.CharField(max_length=50),
    "kind": models.CharField(max_length=20, default="sync"),
    "note": models.TextField(default=""),
}


class Applied:
    """A migration applied to one database, unapplied at the end."""

    def __init__(self, alias: str, before: ProjectState, migration: Migration) -> None:
        self.alias, self.before, self.migration = alias, before, migration

    def __enter__(self) -> Applied:
        with connections[self.alias].schema_editor(atomic=self.migration.atomic) as editor:
            self.migration.apply(self.before.clone(), editor)
        return self

    def __exit__(self, *exc: object) -> None:
        with connections[self.alias].schema_editor(atomic=self.migration.atomic) as editor:
            self.migration.unapply(self.before.clone(), editor)


@pytest.fixture
def ping_becomes_unique(alias: str) -> Iterator[tuple[ProjectState, Migration]]:
    yield change(alias, redeclared(Ping, PING_FIELDS, {"unique": ("message",)}))
    Ping.queue.using(alias).purge()


def constraints(alias: str, table: str) -> dict[str, Any]:
    with connections[alias].cursor() as cursor:
        return connections[alias].introspection.get_constraints(cursor, table)


def test_a_model_that_becomes_unique_gets_the_column_and_the_index(
    alias: str, ping_becomes_unique: tuple[ProjectState, Migration]
) -> None:
    before, migration = ping_becomes_unique
    add_field, add_constraint = migration.operations
    assert isinstance(add_field, AddField) and add_field.name == "unique_key"
    assert add_field.model_name == "pingqueuemeta" and add_field.field.null
    assert isinstance(add_constraint, AddConstraint)
    name = index_name("testapp_ping", "unique")
    assert add_constraint.constraint.name == name
    text = MigrationWriter(migration).as_string()
    assert "models.Q(('unique_key__isnull', False), ('state__in', [0, 1, 6]))" in text

    with Applied(alias, before, migration):
        found = constraints(alias, "testapp_ping_meta")[name]
        assert found["unique"] and found["columns"] == ["unique_key"]
        # The core's unique push works on the migrated tables.
        spec = Ping.queue.spec
        unique = QueueSpec(spec.table, spec.fields, QueueOptions(unique=("message",)))
        ex = DjangoExecutor(alias)
        core = SplitQueue(unique, ex.dialect)
        first = core.push(ex, {"message": "hello"})
        again = core.push(ex, {"message": "hello"})
        assert again == first and again.duplicate
    assert name not in constraints(alias, "testapp_ping_meta")


@pytest.mark.postgresql
def test_a_scope_change_replaces_the_index() -> None:
    stored = redeclared(UniqueJob, UNIQUE_JOB_FIELDS, {"unique": ("account", "kind"),
                                                      "unique_scope": "stored"})  # fmt: skip
    before, migration = change("default", stored)
    remove, add = migration.operations
    name = index_name("testapp_uniquejob", "unique")
    assert isinstance(remove, RemoveConstraint) and remove.name == name
    assert isinstance(add, AddConstraint) and add.constraint.name == name
    assert add.constraint.condition == models.Q(("unique_key__isnull", False))
    with Applied("default", before, migration):
        assert constraints("default", "testapp_uniquejob_meta")[name]["unique"]


@pytest.mark.postgresql
def test_a_model_that_stops_being_unique_drops_the_index_and_the_column() -> None:
    _, migration = change("default", redeclared(UniqueJob, UNIQUE_JOB_FIELDS, {}))
    remove_constraint, remove_field = migration.operations
    assert isinstance(remove_constraint, RemoveConstraint)
    assert isinstance(remove_field, RemoveField) and remove_field.name == "unique_key"
