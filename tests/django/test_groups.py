"""Consumer groups (fan-out) on a Django queue model: ``QueueOptions.groups`` reaches the core
spec, each group gets a generated meta model (``<Model>QueueMeta_<group>``) and head model
(``<Model>QueueHead_<group>``) whose tables are the core's (``dbqueue.schema.group_statements``),
``makemigrations`` writes a group added or removed later, and ``Model.queue.group(name)`` pops,
acks, fails and retries that group's deliveries as model instances."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from django.apps import apps
from django.apps.registry import Apps
from django.db import connections, models
from django.db.migrations import CreateModel, DeleteModel, Migration, RemoveIndex
from django.db.migrations.autodetector import MigrationAutodetector
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.state import ModelState, ProjectState

from dbqueue.errors import InvalidArgument, UnsupportedOperation
from dbqueue.message import State
from dbqueue.spec import QueueSpec
from dbqueue_django.models import QueueModel
from dbqueue_django.queue import DjangoGroupQueue
from tests.django.test_parity import (
    assert_heads_agree,
    columns,
    core_copy,
    indexes,
    numeric_defaults,
)
from tests.django.test_unique_migrations import Applied
from tests.django.testapp.models import FanoutJob

pytestmark = [
    pytest.mark.django,
    pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
]
GROUPS = ("email", "search")
ZERO = dt.timedelta(0)


# -- the declaration and the generated models ----------------------------------------------


def test_the_groups_reach_the_core_spec() -> None:
    spec = FanoutJob.queue.spec
    assert spec.options.groups == GROUPS and spec.fans_out
    assert spec.group_meta_tables == (
        "testapp_fanoutjob_meta_email",
        "testapp_fanoutjob_meta_search",
    )


def test_a_grouped_queue_gets_a_meta_model_per_group_and_no_shared_one() -> None:
    models_by_group = FanoutJob.queue_group_models
    assert list(models_by_group) == list(GROUPS)
    assert not hasattr(FanoutJob, "queue_meta_model")
    for group, meta in models_by_group.items():
        assert meta.__name__ == f"FanoutJobQueueMeta_{group}"
        assert apps.get_model("testapp", f"FanoutJobQueueMeta_{group}") is meta
        spec = FanoutJob.queue.spec.for_group(group)
        assert meta._meta.db_table == spec.meta_table
        assert {i.name for i in meta._meta.indexes} == {
            spec.index_name("ready"),
            spec.index_name("leased"),
        }
        assert "last_error" in {f.name for f in meta._meta.fields}


def test_a_grouped_queue_gets_a_head_model_per_group_and_no_shared_one() -> None:
    heads = FanoutJob.queue_group_head_models
    assert list(heads) == list(GROUPS)
    assert not hasattr(FanoutJob, "queue_head_model")
    for group, head in heads.items():
        assert head.__name__ == f"FanoutJobQueueHead_{group}"
        assert apps.get_model("testapp", f"FanoutJobQueueHead_{group}") is head
        assert head._meta.db_table == FanoutJob.queue.spec.for_group(group).head_table
        assert head._meta.db_table == f"testapp_fanoutjob_head_{group}"
        assert head._meta.verbose_name == f"fanout job queue head ({group})"


@pytest.mark.parametrize("alias", ["default", "sqlite"])
def test_a_group_meta_table_agrees_with_the_core(alias: str) -> None:
    if alias == "default":
        pytest.importorskip("psycopg")
    with core_copy(alias, FanoutJob.queue.spec, "parity_fanout") as core:
        assert columns(alias, "testapp_fanoutjob") == columns(alias, core.table)
        for group in GROUPS:
            django_table = FanoutJob.queue.spec.for_group(group).meta_table
            core_table = core.for_group(group).meta_table
            assert set(columns(alias, django_table)) == {
                "id", "state", "priority", "run_at", "attempts", "lease_until", "last_error"
            }  # fmt: skip
            assert columns(alias, django_table) == columns(alias, core_table)
            assert numeric_defaults(alias, django_table) == numeric_defaults(alias, core_table)
            assert indexes(alias, django_table) == indexes(alias, core_table)
            django_head = FanoutJob.queue.spec.for_group(group).head_table
            assert_heads_agree(alias, django_head, core.for_group(group).head_table)


@pytest.mark.postgresql
def test_the_group_tables_get_the_core_storage_parameters() -> None:
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT relname, reloptions FROM pg_class WHERE relname = ANY(%s)",
            [list(FanoutJob.queue.spec.group_meta_tables)],
        )
        found = dict(cursor.fetchall())
    assert set(found) == set(FanoutJob.queue.spec.group_meta_tables)
    assert all("fillfactor=80" in (options or []) for options in found.values())


# -- migrations ----------------------------------------------------------------------------


def redeclared(groups: tuple[str, ...]) -> list[ModelState]:
    """The migration states of FanoutJob declared again (in a registry of its own) with these
    groups: its data model and its groups' meta and head models."""
    registry = Apps(["tests.django.testapp"])
    attrs: dict[str, Any] = {
        "__module__": __name__,
        "Meta": type("Meta", (), {"app_label": "testapp", "apps": registry}),
        "QueueOptions": type("QueueOptions", (), {"groups": groups, "max_attempts": 2}),
        "subject": models.CharField(max_length=100),
    }
    again: Any = type("FanoutJob", (QueueModel,), attrs)
    generated = (*again.queue_group_models.values(), *again.queue_group_head_models.values())
    return [ModelState.from_model(m) for m in (again, *generated)]


def change(alias: str, groups: tuple[str, ...]) -> tuple[ProjectState, Migration]:
    """The current migration state, and what makemigrations writes when FanoutJob declares
    ``groups`` (the autodetector's own output)."""
    loader = MigrationLoader(connections[alias])
    before = loader.project_state()
    after = before.clone()
    for name in [n for (app, n) in after.models if app == "testapp"]:
        if name.startswith(("fanoutjobqueuemeta_", "fanoutjobqueuehead_")):
            del after.models["testapp", name]
    for state in redeclared(groups):
        after.models["testapp", state.name_lower] = state
    # A clone: the autodetector takes a deleted model's indexes out of the state it is given.
    detector = MigrationAutodetector(before.clone(), after)
    (migration,) = detector.changes(graph=loader.graph)["testapp"]
    return before, migration


def tables(alias: str) -> set[str]:
    with connections[alias].cursor() as cursor:
        return set(connections[alias].introspection.table_names(cursor))


def test_the_test_app_migrations_are_up_to_date(alias: str) -> None:
    loader = MigrationLoader(connections[alias])
    after = ProjectState.from_apps(apps)
    changes = MigrationAutodetector(loader.project_state(), after).changes(graph=loader.graph)
    assert "testapp" not in changes


def test_adding_a_group_creates_just_its_tables(alias: str) -> None:
    before, migration = change(alias, (*GROUPS, "audit"))
    creates = {op.name: op for op in migration.operations}
    assert set(creates) == {"FanoutJobQueueMeta_audit", "FanoutJobQueueHead_audit"}
    assert all(isinstance(op, CreateModel) for op in creates.values())
    assert creates["FanoutJobQueueMeta_audit"].options["db_table"] == "testapp_fanoutjob_meta_audit"
    assert creates["FanoutJobQueueHead_audit"].options["db_table"] == "testapp_fanoutjob_head_audit"
    added = {"testapp_fanoutjob_meta_audit", "testapp_fanoutjob_head_audit"}
    with Applied(alias, before, migration):
        assert added <= tables(alias)
        # The core's own tables for the grown queue: the same group tables.
        spec = FanoutJob.queue.spec
        grown = QueueSpec(
            "parity_grown", spec.fields, replace(spec.options, groups=(*GROUPS, "audit"))
        )
        with core_copy(alias, grown, "parity_grown") as core:
            core_table = core.for_group("audit").meta_table
            django_table = "testapp_fanoutjob_meta_audit"
            assert columns(alias, django_table) == columns(alias, core_table)
            assert indexes(alias, django_table) == indexes(alias, core_table)
            head = core.for_group("audit").head_table
            assert_heads_agree(alias, "testapp_fanoutjob_head_audit", head)
    assert not added & tables(alias)


def test_removing_a_group_deletes_its_tables(alias: str) -> None:
    before, migration = change(alias, ("email",))
    deletes = [op for op in migration.operations if isinstance(op, DeleteModel)]
    assert {op.name for op in deletes} == {"FanoutJobQueueMeta_search", "FanoutJobQueueHead_search"}
    # Django 6 drops a model's indexes before the model itself; Django 5.2 the model alone.
    others = [op for op in migration.operations if not isinstance(op, DeleteModel)]
    assert {(type(op), op.model_name) for op in others} <= {
        (RemoveIndex, "fanoutjobqueuemeta_search")
    }
    removed = {"testapp_fanoutjob_meta_search", "testapp_fanoutjob_head_search"}
    with Applied(alias, before, migration):
        assert not removed & tables(alias)
        assert {"testapp_fanoutjob_meta_email", "testapp_fanoutjob_head_email"} <= tables(alias)
    assert removed <= tables(alias)


# -- Model.queue.group ---------------------------------------------------------------------


@pytest.fixture
def fanout(alias: str) -> Iterator[Any]:
    queue = FanoutJob.queue.using(alias)
    yield queue
    queue.delete(list(FanoutJob.objects.using(alias).values_list("pk", flat=True)))


def test_each_group_pops_every_item_once_as_model_instances(alias: str, fanout: Any) -> None:
    first = fanout.push(subject="one")
    second = FanoutJob.objects.using(alias).create(subject="two").pk
    for group in GROUPS:
        queue = fanout.group(group)
        assert isinstance(queue, DjangoGroupQueue) and queue.alias == alias
        popped = queue.pop_batch(10)
        assert [(type(j), j.pk, j.subject) for j in popped] == [
            (FanoutJob, first, "one"), (FanoutJob, second, "two")
        ]  # fmt: skip
        assert queue.pop_batch(10) == []
    search = fanout.group("search")
    assert search.ack(popped) == [first, second]
    assert search.count() == 0
    (job, other) = fanout.group("email").items().order_by("id")
    assert job.state == other.state == State.LEASED
    assert fanout.group("email").stats()["leased"] == 2


def test_ack_fail_and_retry_are_each_groups_own(alias: str, fanout: Any) -> None:
    item = fanout.push(subject="one")
    email, search = fanout.group("email"), fanout.group("search")
    (job,) = email.pop_batch(1)
    assert email.ack(job) == [item]
    assert FanoutJob.objects.using(alias).filter(pk=item).exists()  # search still holds it
    assert email.count() == 0 and search.count() == 1
    for attempt in (1, 2):
        (job,) = search.pop_batch(1)
        search.fail(job, f"attempt {attempt}", delay=ZERO)
    (failed,) = search.failed()
    assert failed.pk == item and failed.group_error == "attempt 2" and failed.attempts == 2
    assert search.retry([item]) == 1
    (job,) = search.pop_batch(1)
    assert job.pk == item and job.subject == "one"
    assert search.ack(job) == [item]
    assert not FanoutJob.objects.using(alias).filter(pk=item).exists()  # its last group acked


def test_using_then_group_and_group_then_using(alias: str, fanout: Any) -> None:
    item = fanout.push(subject="one")
    other = "sqlite" if alias == "default" else "default"
    queue = FanoutJob.queue.using(other).group("email").using(alias)
    assert queue.alias == alias and queue.name == "email"
    assert [j.pk for j in queue.pop_batch(5)] == [item]
    assert FanoutJob.queue.using(alias).group("search").count() == 1


def test_the_queue_as_a_whole_refuses_a_groups_operations(alias: str, fanout: Any) -> None:
    fanout.push(subject="one")
    with pytest.raises(UnsupportedOperation, match=r"queue\.group\(name\)"):
        fanout.pop_batch(1)
    with pytest.raises(UnsupportedOperation, match=r"FanoutJob\.queue\.group\(name\).items\(\)"):
        fanout.items()
    with pytest.raises(UnsupportedOperation, match="does not push"):
        fanout.group("email").push(subject="two")
    with pytest.raises(InvalidArgument, match="no consumer group 'audit'"):
        fanout.group("audit")


def test_deleting_an_item_removes_it_from_every_group(alias: str, fanout: Any) -> None:
    item = fanout.push(subject="one")
    kept = fanout.push(subject="two")
    FanoutJob.objects.using(alias).filter(pk=item).delete()  # the ORM cascades to each group
    for group in GROUPS:
        assert [j.pk for j in fanout.group(group).items()] == [kept]
    assert fanout.delete([kept]) == 1
    assert not FanoutJob.objects.using(alias).exists()
