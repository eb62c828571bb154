"""QueueModel: the generated ``<Model>QueueMeta`` and ``<Model>QueueHead`` models, the tables
and indexes ``migrate`` creates from the test app's migration (and drops when migrating back),
and the storage parameters the post_migrate hook sets."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.apps import apps
from django.apps.registry import Apps
from django.core.management import call_command
from django.db import connections, models
from django.test.utils import isolate_apps

from dbqueue.spec import index_name
from dbqueue_django.models import QueueModel, TaskItem, queue_models
from tests.django.aliases import ALIASES
from tests.django.testapp.models import FanoutJob, Job, Ping

DJANGO_DB = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])
pytestmark = pytest.mark.django

DATA_COLUMNS = {
    "id", "enqueued_at", "last_error",
    "name", "n", "doc", "at", "amount", "uid", "blob", "flag", "small",
}  # fmt: skip
#: Meta column -> (nullable, the Django field type introspection maps its column type to).
META_COLUMNS = {
    "id": (False, "BigIntegerField"),
    "state": (False, "SmallIntegerField"),
    "priority": (False, "SmallIntegerField"),
    "run_at": (False, "DateTimeField"),
    "attempts": (False, "SmallIntegerField"),
    "lease_until": (True, "DateTimeField"),
}


def describe(alias: str, table: str) -> dict[str, Any]:
    """Column name -> Django's FieldInfo for ``table`` on ``alias``."""
    connection = connections[alias]
    with connection.cursor() as cursor:
        return {c.name: c for c in connection.introspection.get_table_description(cursor, table)}


def constraints(alias: str, table: str) -> dict[str, dict[str, Any]]:
    connection = connections[alias]
    with connection.cursor() as cursor:
        return connection.introspection.get_constraints(cursor, table)


def index_predicate(alias: str, name: str) -> str:
    """The WHERE clause of a partial index, without quotes, parentheses or extra blanks."""
    with connections[alias].cursor() as cursor:
        if connections[alias].vendor == "postgresql":
            cursor.execute(
                "SELECT pg_get_expr(i.indpred, i.indrelid) FROM pg_index i "
                "JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = %s",
                [name],
            )
            (predicate,) = cursor.fetchone()
        else:
            cursor.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = %s", [name]
            )
            (sql,) = cursor.fetchone()
            predicate = sql.split(" WHERE ", 1)[1]
    return " ".join(predicate.replace('"', "").replace("(", "").replace(")", "").split())


def reloptions(table: str) -> set[str]:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = %s", [table])
        (options,) = cursor.fetchone()
    return set(options or [])


# -- the generated meta model ---------------------------------------------------------------


def test_meta_model_is_generated_and_registered_in_the_same_app() -> None:
    meta = Job.queue_meta_model
    assert meta._meta.label == "testapp.JobQueueMeta"
    assert meta._meta.db_table == "testapp_job_meta"
    assert apps.get_model("testapp", "JobQueueMeta") is meta
    assert apps.get_model("testapp", "PingQueueMeta") is Ping.queue_meta_model
    assert Ping.queue_meta_model is not meta
    pk = meta._meta.pk
    assert pk.name == "item" and pk.column == "id" and pk.related_model is Job
    assert pk.db_constraint is False


def test_meta_model_declares_the_two_partial_indexes() -> None:
    indexes = {i.name: i for i in Job.queue_meta_model._meta.indexes}
    ready, leased = index_name("testapp_job", "ready"), index_name("testapp_job", "leased")
    assert set(indexes) == {ready, leased}
    assert all(len(name) <= 30 for name in indexes)  # Django's limit for index names
    assert indexes[ready].fields == ["-priority", "run_at", "item"]
    assert indexes[leased].fields == ["lease_until"]


def test_an_abstract_queue_model_gets_no_meta_model_but_its_subclasses_do() -> None:
    with isolate_apps("tests.django.testapp") as isolated:

        class AbstractTask(QueueModel):
            title = models.CharField(max_length=20)

            class Meta:
                abstract = True
                app_label = "testapp"

        class Task(AbstractTask):
            class Meta:
                app_label = "testapp"

        assert "queue_meta_model" not in vars(AbstractTask)
        assert not hasattr(AbstractTask, "queue_meta_model")
        assert not hasattr(AbstractTask, "queue_head_model")
        assert isolated.get_model("testapp", "TaskQueueMeta") is Task.queue_meta_model
        assert isolated.get_model("testapp", "TaskQueueHead") is Task.queue_head_model
        with pytest.raises(LookupError):
            isolated.get_model("testapp", "AbstractTaskQueueMeta")
        with pytest.raises(LookupError):
            isolated.get_model("testapp", "AbstractTaskQueueHead")
        assert Task.queue_meta_model._meta.db_table == "testapp_task_meta"
        assert Task.queue_head_model._meta.db_table == "testapp_task_head"
    with pytest.raises(LookupError):
        apps.get_model("testapp", "TaskQueueMeta")
    with pytest.raises(LookupError):
        apps.get_model("testapp", "TaskQueueHead")


def test_the_meta_model_joins_the_registry_of_its_data_model() -> None:
    """A model declared with ``Meta.apps`` (as tests and migrations do) must not leak its
    meta model into the global registry, where makemigrations would pick it up."""
    registry = Apps(["tests.django.testapp"])
    try:

        class Gadget(QueueModel):
            label = models.CharField(max_length=20)

            class Meta:
                app_label = "testapp"
                apps = registry

        for name in ("gadgetqueuemeta", "gadgetqueuehead"):
            leaked = apps.all_models["testapp"].get(name)
            assert leaked is None, f"{name} was registered in the global app registry"
        assert registry.get_model("testapp", "GadgetQueueMeta") is Gadget.queue_meta_model
        assert registry.get_model("testapp", "GadgetQueueHead") is Gadget.queue_head_model
    finally:
        # Whatever happened, leave the global registry as the other tests expect it.
        popped = [
            apps.all_models["testapp"].pop(n, None) for n in ("gadgetqueuemeta", "gadgetqueuehead")
        ]
        if any(m is not None for m in popped):
            apps.clear_cache()


# -- the generated head model ---------------------------------------------------------------


def test_head_model_is_generated_beside_the_meta_model() -> None:
    head = Job.queue_head_model
    assert head._meta.label == "testapp.JobQueueHead"
    assert head._meta.db_table == Job.queue.spec.head_table == "testapp_job_head"
    assert apps.get_model("testapp", "JobQueueHead") is head
    assert apps.get_model("testapp", "PingQueueHead") is Ping.queue_head_model
    assert head._meta.verbose_name == "job queue head"
    assert Job.queue_group_head_models == {}
    assert TaskItem.queue_head_model._meta.db_table == "dbqueue_django_taskitem_head"
    assert TaskItem.queue_head_model._meta.app_label == "dbqueue_django"


def test_head_model_has_the_core_head_columns() -> None:
    """``priority smallint NOT NULL PRIMARY KEY, run_at timestamptz NOT NULL``, as
    ``dbqueue.schema.head_statement`` creates them: no default, no relation to the data."""
    fields = {f.name: f for f in Job.queue_head_model._meta.get_fields()}
    assert set(fields) == {"priority", "run_at"}
    priority, run_at = fields["priority"], fields["run_at"]
    assert isinstance(priority, models.SmallIntegerField) and priority.primary_key
    assert isinstance(run_at, models.DateTimeField) and not run_at.null
    assert not priority.has_default() and not run_at.has_default()
    assert not priority.has_db_default() and not run_at.has_db_default()
    assert Job.queue_head_model._meta.indexes == [] and Job.queue_head_model._meta.constraints == []


def test_every_split_queue_has_its_head_tables() -> None:
    """One head model per meta model: the queue's, or each consumer group's."""
    for model in queue_models():
        if model.queue_layout != "split":
            continue
        spec = model.queue.spec
        if spec.fans_out:
            heads = model.queue_group_head_models  # type: ignore[attr-defined]
            assert {g: h._meta.db_table for g, h in heads.items()} == {
                g: spec.for_group(g).head_table for g in spec.options.groups
            }
        else:
            assert model.queue_head_model._meta.db_table == spec.head_table  # type: ignore[attr-defined]
    assert set(FanoutJob.queue_group_head_models) == {"email", "search"}


# -- the tables and indexes migrate creates -------------------------------------------------


@DJANGO_DB
@pytest.mark.parametrize("alias", ALIASES)
def test_migrate_creates_both_tables_with_their_columns(alias: str) -> None:
    tables = set(connections[alias].introspection.table_names())
    assert {"testapp_job", "testapp_job_meta", "testapp_ping", "testapp_ping_meta"} <= tables
    data = describe(alias, "testapp_job")
    assert set(data) == DATA_COLUMNS
    assert not data["name"].null_ok and not data["n"].null_ok and not data["flag"].null_ok
    assert data["doc"].null_ok and data["last_error"].null_ok and data["small"].null_ok
    assert set(describe(alias, "testapp_ping")) == {"id", "enqueued_at", "last_error", "message"}

    meta = describe(alias, "testapp_job_meta")
    assert set(meta) == set(META_COLUMNS)
    introspection = connections[alias].introspection
    for name, (nullable, field_type) in META_COLUMNS.items():
        if name == "id" and alias == "sqlite":
            # Django's SQLite introspection reports every integer primary key as AutoField.
            field_type = "AutoField"
        assert bool(meta[name].null_ok) is nullable, name
        assert introspection.get_field_type(meta[name].type_code, meta[name]) == field_type, name
    if alias == "default":
        # The meta key is the data row's id, never generated: no identity or sequence.
        with connections[alias].cursor() as cursor:
            assert introspection.get_sequences(cursor, "testapp_job_meta") == []
            assert introspection.get_sequences(cursor, "testapp_job") != []


def head_tables() -> set[str]:
    """The head tables of every split queue of the test project (the task queue's included)."""
    found = set()
    for model in queue_models():
        if model.queue_layout == "split":
            spec = model.queue.spec
            specs = spec.group_specs if spec.fans_out else (spec,)
            found |= {s.head_table for s in specs}
    return found


@DJANGO_DB
@pytest.mark.parametrize("alias", ALIASES)
def test_migrate_creates_the_head_tables(alias: str) -> None:
    heads = head_tables()
    assert {
        "testapp_job_head",
        "testapp_fanoutjob_head_email",
        "dbqueue_django_taskitem_head",
    } <= heads
    assert heads <= set(connections[alias].introspection.table_names())
    head = describe(alias, "testapp_job_head")
    assert set(head) == {"priority", "run_at"}
    assert not head["priority"].null_ok and not head["run_at"].null_ok
    (pk,) = [c for c in constraints(alias, "testapp_job_head").values() if c["primary_key"]]
    assert pk["columns"] == ["priority"]


@DJANGO_DB
@pytest.mark.parametrize("alias", ALIASES)
def test_migrating_back_drops_the_head_tables_and_forward_creates_them(alias: str) -> None:
    """The migrations that added the head tables, unapplied then applied again: the meta
    tables stay, and the queues work on the tables created again (on PostgreSQL a push of
    another priority and the pops read and write the head table)."""
    heads = head_tables()
    try:
        call_command("migrate", "testapp", "0011", database=alias, verbosity=0)
        call_command("migrate", "dbqueue_django", "0007", database=alias, verbosity=0)
        tables = set(connections[alias].introspection.table_names())
        assert not heads & tables
        assert {"testapp_job_meta", "testapp_fanoutjob_meta_email"} <= tables
    finally:
        call_command("migrate", database=alias, verbosity=0)
    assert heads <= set(connections[alias].introspection.table_names())
    queue = Ping.queue.using(alias)
    low = queue.push(message="low", priority=-1)
    high = queue.push(message="high", priority=2)
    assert [m.pk for m in queue.pop_batch(5)] == [high, low]


@DJANGO_DB
@pytest.mark.parametrize("alias", ALIASES)
def test_migrate_creates_the_partial_indexes(alias: str) -> None:
    found = constraints(alias, "testapp_job_meta")
    ready, leased = index_name("testapp_job", "ready"), index_name("testapp_job", "leased")
    assert found[ready]["index"] and not found[ready]["unique"]
    assert found[ready]["columns"] == ["priority", "run_at", "id"]
    assert found[ready]["orders"] == ["DESC", "ASC", "ASC"]
    assert found[leased]["columns"] == ["lease_until"]
    assert index_predicate(alias, ready) == "state = 0"
    assert index_predicate(alias, leased) == "state = 1"
    # The meta table's key is its own primary key, with no foreign key to the data table.
    assert not any(c["foreign_key"] for c in found.values())
    (pk,) = [c for c in found.values() if c["primary_key"]]
    assert pk["columns"] == ["id"]


@DJANGO_DB
def test_makemigrations_finds_nothing_to_do() -> None:
    out = io.StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", verbosity=1, stdout=out)
    except SystemExit as exc:  # --check exits 1 when a migration would be written
        pytest.fail(f"makemigrations --check wants changes (exit {exc.code}):\n{out.getvalue()}")
    assert "No changes detected" in out.getvalue()


@DJANGO_DB
@pytest.mark.parametrize("alias", ALIASES)
def test_the_reverse_relation_joins_data_and_meta(alias: str) -> None:
    queue = Job.queue.using(alias)
    first = queue.push(name="first")
    second = queue.push(name="second", priority=-1)
    (popped,) = queue.pop_batch(1)
    assert popped.pk == first

    objects = Job.objects.using(alias)
    assert list(objects.filter(queue_meta__state=0).values_list("pk", flat=True)) == [second]
    assert list(objects.filter(queue_meta__state=1).values_list("pk", flat=True)) == [first]
    job = objects.select_related("queue_meta").get(pk=second)
    assert job.queue_meta.state == 0 and job.queue_meta.priority == -1
    assert job.queue_meta.get_state_display() == "ready"
    meta = Job.queue_meta_model._default_manager.using(alias).get(pk=first)
    assert meta.item == Job.objects.using(alias).get(pk=first)
    assert meta.attempts == 1 and meta.lease_until is not None
    assert str(meta) == f"{first} (leased)"


# -- storage parameters (PostgreSQL) -------------------------------------------------------

META_OPTIONS = {
    "fillfactor=80",
    "autovacuum_vacuum_scale_factor=0.01",
    "autovacuum_vacuum_threshold=1000",
    "autovacuum_analyze_scale_factor=0.02",
    "autovacuum_vacuum_cost_delay=0",
}
DATA_OPTIONS = {
    "autovacuum_vacuum_scale_factor=0.01",
    "autovacuum_vacuum_threshold=1000",
    "autovacuum_vacuum_insert_scale_factor=0.05",
}


@DJANGO_DB
@pytest.mark.postgresql
def test_migrate_tunes_the_postgresql_tables() -> None:
    assert reloptions("testapp_job_meta") == META_OPTIONS
    assert reloptions("testapp_job") == DATA_OPTIONS
    assert reloptions("testapp_ping_meta") == META_OPTIONS


@DJANGO_DB
@pytest.mark.postgresql
def test_the_post_migrate_hook_restores_the_storage_parameters() -> None:
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "ALTER TABLE testapp_job_meta RESET (fillfactor, autovacuum_vacuum_scale_factor, "
            "autovacuum_vacuum_threshold, autovacuum_analyze_scale_factor, "
            "autovacuum_vacuum_cost_delay)"
        )
    assert reloptions("testapp_job_meta") == set()
    call_command("migrate", database="default", verbosity=0, interactive=False)
    assert reloptions("testapp_job_meta") == META_OPTIONS


@DJANGO_DB
@pytest.mark.sqlite
def test_migrate_on_sqlite_leaves_storage_parameters_alone() -> None:
    # Nothing to tune: the hook must simply not fail on a database without the feature.
    call_command("migrate", database="sqlite", verbosity=0, interactive=False)
    assert "testapp_job_meta" in connections["sqlite"].introspection.table_names()
