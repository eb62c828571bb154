"""Consumer groups (fan-out) on a Django ring queue model: ``QueueOptions.groups`` reaches the
core spec, each group gets a generated state model (``<Model>Ring_<group>``, with the
``RingGroupRows`` index that fills it) and side model (``<Model>Side_<group>``) whose tables,
counter and rows are the core's (``dbqueue.schema.group_ring_statements``), ``makemigrations``
writes a group added or removed later, and ``Model.queue.group(name)`` pops, acks, fails and
retries that group's deliveries as model instances."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import django
import pytest
from django.apps import apps
from django.apps.registry import Apps
from django.db import connections, models
from django.db.migrations import CreateModel, DeleteModel, Migration, RemoveField, RemoveIndex
from django.db.migrations.autodetector import MigrationAutodetector
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.state import ModelState, ProjectState
from django.db.migrations.writer import MigrationWriter

from dbqueue.errors import InvalidArgument, RingNotEmpty, UnsupportedOperation
from dbqueue.ring import RingQueue, item_state
from dbqueue.spec import QueueSpec, index_name
from dbqueue_django.executor import DjangoExecutor
from dbqueue_django.models import RingQueueModel
from dbqueue_django.ring_queue import RingDjangoGroupQueue
from dbqueue_django.slots import RingGroupRows
from dbqueue_django.upkeep import note_rings, restore_rings
from tests.django.test_async_queue import run
from tests.django.test_groups import tables
from tests.django.test_parity import columns, indexes, numeric_defaults, query
from tests.django.test_ring_parity import core_ring_copy, counter, slot_shape
from tests.django.test_unique_migrations import Applied
from tests.django.testapp.models import FanoutTick

pytestmark = [
    pytest.mark.django,
    pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
]
GROUPS = ("email", "search")
TABLE, CORE = "testapp_fanouttick", "parity_fanouttick"
ZERO = dt.timedelta(0)


def state_indexes(alias: str) -> frozenset[str]:
    """The purposes of a group state table's indexes: its key on PostgreSQL (SQLite's integer
    key is the rowid, no index), the one on seq on SQLite."""
    return frozenset({"pk"} if alias == "default" else {"seq"})


def side_indexes(alias: str, table: str) -> dict[str, tuple[Any, ...]]:
    """A side table's indexes (its key, the waiting index), the waiting index's predicate
    spelled as the core does (Django writes ``~Q(state=3)`` as ``NOT (state = 3)``)."""
    found = indexes(alias, table, frozenset({"pk", "waiting"}))
    return {
        purpose: tuple(
            d.replace("(NOT (state = 3))", "(state <> 3)").replace("NOT (state = 3)", "state <> 3")
            if isinstance(d, str)
            else d
            for d in definition
        )
        for purpose, definition in found.items()
    }


# -- the declaration and the generated models ----------------------------------------------


def test_the_groups_reach_the_core_spec() -> None:
    spec = FanoutTick.queue.spec
    assert spec.options.groups == GROUPS and spec.fans_out
    assert [g.state_table for g in spec.group_specs] == [f"{TABLE}_ring_{g}" for g in GROUPS]
    assert [g.failed_table for g in spec.group_specs] == [f"{TABLE}_side_{g}" for g in GROUPS]


def test_a_grouped_ring_gets_a_state_and_a_side_model_per_group() -> None:
    assert list(FanoutTick.queue_group_models) == list(GROUPS)
    assert list(FanoutTick.queue_group_failed_models) == list(GROUPS)
    assert FanoutTick.failed_model._meta.db_table == f"{TABLE}_failed"  # spills before groups
    for group in GROUPS:
        spec = FanoutTick.queue.spec.for_group(group)
        state = FanoutTick.queue_group_models[group]
        side = FanoutTick.queue_group_failed_models[group]
        assert state.__name__ == f"FanoutTickRing_{group}"
        assert side.__name__ == f"FanoutTickSide_{group}"
        assert apps.get_model("testapp", state.__name__) is state
        assert apps.get_model("testapp", side.__name__) is side
        assert state._meta.db_table == spec.state_table
        assert side._meta.db_table == spec.failed_table
        (rows,) = state._meta.indexes
        assert rows == RingGroupRows.for_group(TABLE, group, 8)
        assert rows.name == index_name(spec.state_table, "seq")
        assert [i.name for i in side._meta.indexes] == [spec.index_name("waiting")]
        # The side model keeps the declared nullability, as the ring's own failed model.
        assert not side._meta.get_field("subject").null and side._meta.get_field("note").null


# -- parity with the core's DDL ------------------------------------------------------------


@pytest.fixture
def core_ring(alias: str) -> Iterator[QueueSpec]:
    """The core's grouped ring for FanoutTick's spec, named ``parity_fanouttick``, on
    ``alias``."""
    with core_ring_copy(alias, FanoutTick.queue.spec, CORE) as spec:
        yield spec


def test_each_groups_state_table_agrees_with_the_core(alias: str, core_ring: QueueSpec) -> None:
    for group in GROUPS:
        django = FanoutTick.queue.spec.for_group(group).state_table
        core = core_ring.for_group(group).state_table
        assert set(columns(alias, django)) == {
            "slot", "seq", "state", "attempts", "pushed_at", "lease_until", "last_error"
        }  # fmt: skip
        assert columns(alias, django) == columns(alias, core)
        assert numeric_defaults(alias, django) == numeric_defaults(alias, core)
        purposes = state_indexes(alias)
        assert indexes(alias, django, purposes) == indexes(alias, core, purposes)
        # A row per slot, each settled at the number its slot holds.
        assert slot_shape(alias, django) == slot_shape(alias, core) == (8, {0}, {0})
        assert query(alias, f'SELECT slot, seq FROM "{django}" ORDER BY slot') == query(
            alias, f'SELECT slot, seq FROM "{TABLE}" ORDER BY slot'
        )


def test_each_groups_side_table_agrees_with_the_core(alias: str, core_ring: QueueSpec) -> None:
    for group in GROUPS:
        django = FanoutTick.queue.spec.for_group(group).failed_table
        core = core_ring.for_group(group).failed_table
        assert columns(alias, django) == columns(alias, core)
        assert columns(alias, django) == columns(alias, f"{TABLE}_failed")
        assert side_indexes(alias, django) == side_indexes(alias, core)


def test_each_groups_pop_counter_agrees_with_the_core(alias: str, core_ring: QueueSpec) -> None:
    for group in GROUPS:
        assert counter(alias, f"{TABLE}_pop_{group}") == counter(alias, f"{CORE}_pop_{group}")


@pytest.mark.postgresql
@pytest.mark.parametrize("alias", ["default"])
def test_the_state_tables_get_the_core_storage_parameters(alias: str, core_ring: QueueSpec) -> None:
    sql = "SELECT reloptions FROM pg_class WHERE relname = %s"
    for group in GROUPS:
        django = query(alias, sql, [f"{TABLE}_ring_{group}"])
        assert django == query(alias, sql, [f"{CORE}_ring_{group}"])
        assert "fillfactor=50" in django[0][0]


# -- migrations ----------------------------------------------------------------------------


def redeclared(groups: tuple[str, ...], capacity: int = 8) -> list[ModelState]:
    """The migration states of FanoutTick declared again (in a registry of its own) with
    these groups and capacity: the ring, its failed model and its groups' state and side
    models."""
    registry = Apps(["tests.django.testapp"])
    options = {"capacity": capacity, "groups": groups, "max_attempts": 2}
    attrs: dict[str, Any] = {
        "__module__": __name__,
        "Meta": type("Meta", (), {"app_label": "testapp", "apps": registry}),
        "QueueOptions": type("QueueOptions", (), options),
        "subject": models.CharField(max_length=100),
        "note": models.TextField(null=True),
    }
    again: Any = type("FanoutTick", (RingQueueModel,), attrs)
    generated = [
        again.failed_model,
        *again.queue_group_models.values(),
        *again.queue_group_failed_models.values(),
    ]
    return [ModelState.from_model(m) for m in (again, *generated)]


def change(
    alias: str, groups: tuple[str, ...], capacity: int = 8, before: ProjectState | None = None
) -> tuple[ProjectState, Migration]:
    """The current migration state (or ``before``), and what makemigrations writes when
    FanoutTick declares ``groups`` and ``capacity`` (the autodetector's own output)."""
    loader = MigrationLoader(connections[alias])
    before = loader.project_state() if before is None else before
    after = before.clone()
    for name in [n for (app, n) in after.models if app == "testapp"]:
        if name.startswith(("fanouttickring_", "fanouttickside_")):
            del after.models["testapp", name]
    for state in redeclared(groups, capacity):
        after.models["testapp", state.name_lower] = state
    detector = MigrationAutodetector(before.clone(), after)
    (migration,) = detector.changes(graph=loader.graph)["testapp"]
    return before, migration


def pop_counters(alias: str) -> set[str]:
    """The group pop counters of FanoutTick that exist (sequences, or one-row tables)."""
    if alias == "default":
        sql = "SELECT sequencename FROM pg_sequences WHERE sequencename LIKE %s"
        found = {name for (name,) in query(alias, sql, [f"{TABLE}_pop_%"])}
    else:
        found = {t for t in tables(alias) if t.startswith(f"{TABLE}_pop_")}
    return found - {f"{TABLE}_pop_seq"}


def test_the_test_app_migrations_are_up_to_date(alias: str) -> None:
    loader = MigrationLoader(connections[alias])
    after = ProjectState.from_apps(apps)
    changes = MigrationAutodetector(loader.project_state(), after).changes(graph=loader.graph)
    assert "testapp" not in changes
    assert pop_counters(alias) == {f"{TABLE}_pop_{g}" for g in GROUPS}


def test_adding_a_group_creates_its_models_counter_and_rows(alias: str) -> None:
    queue = FanoutTick.queue.using(alias)
    before_group = queue.push(subject="before audit")
    ring, migration = change(alias, (*GROUPS, "audit"))
    created = {op.name for op in migration.operations if isinstance(op, CreateModel)}
    assert created == {"FanoutTickRing_audit", "FanoutTickSide_audit"}
    (state,) = [op for op in migration.operations if op.name == "FanoutTickRing_audit"]
    assert state.options["indexes"] == [RingGroupRows.for_group(TABLE, "audit", 8)]
    text = MigrationWriter(migration).as_string()
    assert "dbqueue_django.slots.RingGroupRows(capacity=8, group='audit', name=" in text
    grown_state = migration.mutate_state(ring)
    try:
        with Applied(alias, ring, migration):
            # Unapplying deletes the models, not their indexes: the counter is left to the
            # post_migrate handler, as `migrate` runs it (told what the state had before).
            note_rings(using=alias, apps=grown_state.apps)
            assert {f"{TABLE}_ring_audit", f"{TABLE}_side_audit"} <= tables(alias)
            assert f"{TABLE}_pop_audit" in pop_counters(alias)
            spec = FanoutTick.queue.spec
            grown = replace(spec, options=replace(spec.options, groups=(*GROUPS, "audit")))
            with core_ring_copy(alias, grown, CORE):
                django_table, core_table = f"{TABLE}_ring_audit", f"{CORE}_ring_audit"
                assert columns(alias, django_table) == columns(alias, core_table)
                purposes = state_indexes(alias)
                assert indexes(alias, django_table, purposes) == indexes(
                    alias, core_table, purposes
                )
            # The new group receives what is pushed from then on (by a process declaring it),
            # the others everything.
            ex = DjangoExecutor(alias)
            core_queue = RingQueue(QueueSpec(TABLE, spec.fields, grown.options), ex.dialect)
            after_group = core_queue.push(ex, {"subject": "after audit", "note": None})
            audit = core_queue.group("audit")
            popped = audit.pop_batch(ex, 10)
            assert [m.id for m in popped] == [after_group]
            audit.ack(ex, popped)
            assert [j.id for j in queue.group("email").pop_batch(10)] == [
                before_group, after_group
            ]  # fmt: skip
    finally:
        drain(alias)
    restore_rings(apps.get_app_config("testapp"), alias)
    assert f"{TABLE}_ring_audit" not in tables(alias)
    assert f"{TABLE}_pop_audit" not in pop_counters(alias)


def group_removal(alias: str) -> tuple[ProjectState, Migration]:
    """What makemigrations writes when FanoutTick drops its "search" group, checked."""
    ring, migration = change(alias, ("email",))
    deleted = {op.name for op in migration.operations if isinstance(op, DeleteModel)}
    assert deleted == {"FanoutTickRing_search", "FanoutTickSide_search"}
    # Django 6 drops a model's indexes before the model itself; Django 5.2 the state model's
    # key to the slots, then the model (the counter is then dropped after migrate, see
    # dbqueue_django.upkeep).
    assert {
        (type(op), op.model_name) for op in migration.operations if not isinstance(op, DeleteModel)
    } <= {
        (kind, model)
        for kind in (RemoveIndex, RemoveField)
        for model in ("fanouttickring_search", "fanouttickside_search")
    }
    return ring, migration


def assert_search_removed(alias: str, migration: Migration) -> None:
    assert f"{TABLE}_ring_search" not in tables(alias)
    assert f"{TABLE}_side_search" not in tables(alias)
    assert f"{TABLE}_ring_email" in tables(alias)
    if any(isinstance(op, RemoveIndex) for op in migration.operations):
        assert pop_counters(alias) == {f"{TABLE}_pop_email"}


def test_removing_a_group_then_adding_it_again_in_one_migrate_run(alias: str) -> None:
    """Forward both ways, as one `migrate` of two migrations runs them (post_migrate only at
    the end): on Django 5.2 the removed group's counter is still there when the group comes
    back, and its new rows and counter start at the push counter all the same."""
    queue = FanoutTick.queue.using(alias)
    old = queue.push(subject="before the removal")
    for group in GROUPS:
        queue.group(group).ack(list(queue.group(group).pop_batch(5)))
    ring, removal = group_removal(alias)
    removed = removal.mutate_state(ring)
    readd = change(alias, GROUPS, before=removed)[1]
    assert {op.name for op in readd.operations if isinstance(op, CreateModel)} == {
        "FanoutTickRing_search",
        "FanoutTickSide_search",
    }
    try:
        with connections[alias].schema_editor(atomic=removal.atomic) as editor:
            removal.apply(ring.clone(), editor)
        assert_search_removed(alias, removal)
        with connections[alias].schema_editor(atomic=readd.atomic) as editor:
            readd.apply(removed.clone(), editor)
        assert f"{TABLE}_ring_search" in tables(alias)
        assert pop_counters(alias) == {f"{TABLE}_pop_{g}" for g in GROUPS}
        new = queue.push(subject="after the return")
        for group in GROUPS:
            assert [j.id for j in queue.group(group).pop_batch(5)] == [new], group
        assert new > old
    finally:
        drain(alias)


@pytest.mark.skipif(
    django.VERSION < (6, 0),
    reason="Django 5.2 writes RemoveField of the state model's primary key before DeleteModel "
    "and cannot migrate that back: it creates the model with an id key, then fails to add "
    "the slot key (multiple primary keys for the table)",
)
def test_migrating_a_group_removal_backwards_restores_it(alias: str) -> None:
    ring, migration = group_removal(alias)
    with Applied(alias, ring, migration):
        assert_search_removed(alias, migration)
    assert f"{TABLE}_ring_search" in tables(alias)
    assert pop_counters(alias) == {f"{TABLE}_pop_{g}" for g in GROUPS}


def test_a_capacity_change_refills_each_groups_rows(alias: str) -> None:
    ring, migration = change(alias, GROUPS, capacity=12)
    assert {(type(op).__name__, op.model_name) for op in migration.operations} == {
        (kind, model)
        for kind in ("RemoveIndex", "AddIndex")
        for model in ("fanouttick", "fanouttickring_email", "fanouttickring_search")
    }
    with Applied(alias, ring, migration):
        spec = FanoutTick.queue.spec
        resized = QueueSpec(TABLE, spec.fields, replace(spec.options, capacity=12))
        for group in GROUPS:
            state = f"{TABLE}_ring_{group}"
            assert slot_shape(alias, state) == (12, {0}, {0})
            assert query(alias, f'SELECT slot, seq FROM "{state}" ORDER BY slot') == query(
                alias, f'SELECT slot, seq FROM "{TABLE}" ORDER BY slot'
            )
        assert pop_counters(alias) == {f"{TABLE}_pop_{g}" for g in GROUPS}
        ex = DjangoExecutor(alias)
        core = RingQueue(resized, ex.dialect)
        number = core.push(ex, {"subject": "resized", "note": None})
        for group in GROUPS:
            popped = core.group(group).pop_batch(ex, 5)
            assert [m.id for m in popped] == [number]
            core.group(group).ack(ex, popped)
    # Migrating back fills each group's rows before the slots are back (the operations run
    # in reverse): post_migrate fills them again, as `migrate` sends it.
    restore_rings(apps.get_app_config("testapp"), alias)
    for group in GROUPS:
        assert slot_shape(alias, f"{TABLE}_ring_{group}") == (8, {0}, {0})


def test_a_capacity_change_refuses_a_ring_a_group_holds_messages_for(alias: str) -> None:
    queue = FanoutTick.queue.using(alias)
    queue.push(subject="held")
    ring, migration = change(alias, GROUPS, capacity=12)
    try:
        with pytest.raises(RingNotEmpty, match="holds 1 message"):
            Applied(alias, ring, migration).__enter__()
        assert slot_shape(alias, f"{TABLE}_ring_email")[0] == 8  # nothing was changed
        assert queue.group("email").count() == queue.group("search").count() == 1
    finally:
        drain(alias)


def test_migrating_a_capacity_change_back_refuses_a_group_holding_messages(alias: str) -> None:
    """Backwards, a group's rows go first (the ring's own check runs last): each group's
    removal checks its own messages, so none is dropped."""
    ring, migration = change(alias, GROUPS, capacity=12)
    applied = Applied(alias, ring, migration).__enter__()
    spec = FanoutTick.queue.spec
    ex = DjangoExecutor(alias)
    core = RingQueue(QueueSpec(TABLE, spec.fields, replace(spec.options, capacity=12)), ex.dialect)
    try:
        number = core.push(ex, {"subject": "held at 12", "note": None})
        with pytest.raises(RingNotEmpty, match=r"consumer group '(email|search)' of ring queue"):
            applied.__exit__(None, None, None)
        for group in GROUPS:
            popped = core.group(group).pop_batch(ex, 5)
            assert [m.id for m in popped] == [number], f"{group} lost nothing"
            core.group(group).ack(ex, popped)
    finally:
        applied.__exit__(None, None, None)
        restore_rings(apps.get_app_config("testapp"), alias)
    for group in GROUPS:
        assert slot_shape(alias, f"{TABLE}_ring_{group}") == (8, {0}, {0})


# -- Model.queue.group ---------------------------------------------------------------------


def drain(alias: str) -> None:
    """Empty the ring for every group (acked), and each side table."""
    queue = FanoutTick.queue.using(alias)
    for group in GROUPS:
        member = queue.group(group)
        member.purge()
        member.release(list(member.items()))
        member.ack(list(member.pop_batch(100)))
        member._side().using(alias).all().delete()
    FanoutTick.failed_model._default_manager.using(alias).all().delete()


@pytest.fixture
def fanout(alias: str) -> Iterator[Any]:
    yield FanoutTick.queue.using(alias)
    drain(alias)


def test_each_group_pops_every_message_once_as_model_instances(alias: str, fanout: Any) -> None:
    first = fanout.push(subject="one")
    second = FanoutTick(subject="two")
    second.save(using=alias)
    for group in GROUPS:
        queue = fanout.group(group)
        assert isinstance(queue, RingDjangoGroupQueue) and queue.alias == alias
        popped = queue.pop_batch(10)
        assert [(type(t), t.id, t.subject) for t in popped] == [
            (FanoutTick, first, "one"), (FanoutTick, second.id, "two")
        ]  # fmt: skip
        assert queue.pop_batch(10) == []
    search = fanout.group("search")
    assert search.ack(popped) == [first, second.id]
    assert search.count() == 0 and search.items().count() == 0
    (one, two) = fanout.group("email").items()
    assert (one.id, one.subject, two.id) == (first, "one", second.id)
    assert one.group_state == two.group_state == item_state("leased")
    assert one.group_attempts == 1 and one.group_error is None
    assert [t.id for t in fanout.group("email").items("leased")] == [first, second.id]
    assert fanout.group("email").items("ready").count() == 0
    assert fanout.group("email").stats()["leased"] == 2


def test_ack_fail_and_retry_are_each_groups_own(alias: str, fanout: Any) -> None:
    number = fanout.push(subject="one")
    email, search = fanout.group("email"), fanout.group("search")
    (tick,) = email.pop_batch(1)
    assert email.ack(tick) == [number]
    assert email.count() == 0 and search.count() == 1
    for attempt in (1, 2):
        (tick,) = search.pop_batch(1)
        search.fail(tick, f"attempt {attempt}", delay=ZERO)
        search.rescue()
    (failed,) = search.failed()
    assert failed.last_error == "attempt 2" and failed.attempts == 2
    assert failed.subject == "one"
    assert email.failed().count() == 0
    assert search.retry([failed.id]) == 1
    assert search.failed().count() == 0
    (tick,) = search.pop_batch(1)
    assert tick.subject == "one"
    assert search.ack(tick) == [tick.id]
    assert search.count() == 0


def test_using_then_group_and_group_then_using(alias: str, fanout: Any) -> None:
    number = fanout.push(subject="one")
    other = "sqlite" if alias == "default" else "default"
    queue = FanoutTick.queue.using(other).group("email").using(alias)
    assert isinstance(queue, RingDjangoGroupQueue)
    assert queue.alias == alias and queue.name == "email"
    assert [t.id for t in queue.pop_batch(5)] == [number]
    assert FanoutTick.queue.using(alias).group("search").count() == 1


def test_the_ring_as_a_whole_refuses_a_groups_operations(alias: str, fanout: Any) -> None:
    fanout.push(subject="one")
    with pytest.raises(UnsupportedOperation, match=r"group"):
        fanout.pop_batch(1)
    with pytest.raises(UnsupportedOperation, match=r"FanoutTick\.queue\.group\(name\)\.items"):
        fanout.items()
    with pytest.raises(UnsupportedOperation, match=r"FanoutTick\.queue\.group\(name\)\.failed"):
        fanout.failed()
    with pytest.raises(UnsupportedOperation, match="push"):
        fanout.group("email").push(subject="two")
    with pytest.raises(InvalidArgument, match="no consumer group 'audit'"):
        fanout.group("audit")


def test_a_group_has_the_async_twins(alias: str, fanout: Any) -> None:
    async def consume() -> None:
        number = await fanout.apush(subject="one")
        email = fanout.group("email")
        (tick,) = await email.apop_batch(1)  # a model instance, as pop_batch's
        assert (tick.id, tick.subject) == (number, "one")
        assert await email.aack([tick]) == [number]
        assert await email.acount() == 0
        assert await fanout.group("search").acount("ready") == 1
        await fanout.group("search").acheck()

    run(consume)
