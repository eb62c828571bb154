"""A ring's migrations: a capacity change is detected by the autodetector and works on an empty
ring (the slots replaced, numbering going on), fails clearly on a non-empty one, migrates back;
and migrating backwards past the ring's creation drops everything, counters included."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import replace
from decimal import Decimal

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import connections, models
from django.db.migrations import AddIndex, AlterField, Migration, RemoveIndex
from django.db.migrations.autodetector import MigrationAutodetector
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.state import ProjectState
from django.db.migrations.writer import MigrationWriter

from dbqueue.errors import RingNotEmpty
from dbqueue.message import State
from dbqueue.ring import RingQueue
from dbqueue.schema import SEGMENT_SLOTS
from dbqueue_django.executor import DjangoExecutor
from dbqueue_django.slots import RingSlots
from dbqueue_django.tuning import tune_tables
from tests.core.upkeep.support import while_held
from tests.django.test_ring_models import CAPACITY, TABLE, counters, query, slots
from tests.django.testapp.models import Tick

pytestmark = [
    pytest.mark.django,
    pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
]
NEW_CAPACITY = 12


def capacity_change(alias: str, capacity: int) -> tuple[ProjectState, Migration]:
    """The current migration state, and the migration makemigrations writes for a change of
    Tick's capacity (the autodetector's own output)."""
    loader = MigrationLoader(connections[alias])
    before = loader.project_state()
    after = before.clone()
    after.models["testapp", "tick"].options["indexes"] = [RingSlots.for_table(TABLE, capacity)]
    changes = MigrationAutodetector(before, after).changes(graph=loader.graph)
    (migration,) = changes["testapp"]
    return before, migration


class Resize:
    """The capacity change applied to (and unapplied from) Tick's table on one database."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.before, self.migration = capacity_change(alias, NEW_CAPACITY)
        self.applied = False

    def apply(self) -> None:
        with connections[self.alias].schema_editor(atomic=self.migration.atomic) as editor:
            self.migration.apply(self.before.clone(), editor)
        self.applied = True

    def unapply(self) -> None:
        with connections[self.alias].schema_editor(atomic=self.migration.atomic) as editor:
            self.migration.unapply(self.before.clone(), editor)
        self.applied = False


@pytest.fixture
def resize(alias: str) -> Iterator[Resize]:
    """The capacity change, undone at the end if a test left it applied."""
    change = Resize(alias)
    yield change
    if change.applied:
        Tick.queue.using(alias).purge()
        change.unapply()


def next_number(alias: str) -> int:
    """The number the next push takes: where the slots say numbering goes on."""
    return min(seq for _, seq, _ in slots(alias)) + len(slots(alias))


def assert_fresh_slots(alias: str, capacity: int, first: int) -> None:
    """Every slot empty, slot mod(p, C) holding p - C for the first number p it receives."""
    expected = [(p % capacity, p - capacity, 0) for p in range(first, first + capacity)]
    assert slots(alias) == sorted(expected)


def resized_ring(alias: str) -> tuple[RingQueue, DjangoExecutor]:
    """The core queue as a process declaring the new capacity sees it."""
    spec = Tick.queue.spec
    resized = replace(spec, options=replace(spec.options, capacity=NEW_CAPACITY))
    ex = DjangoExecutor(alias)
    return RingQueue(resized, ex.dialect), ex


# -- capacity changes -----------------------------------------------------------------------


@pytest.mark.postgresql
def test_makemigrations_writes_a_capacity_change_as_remove_and_add() -> None:
    _, migration = capacity_change("default", NEW_CAPACITY)
    remove, add = migration.operations
    assert isinstance(remove, RemoveIndex) and remove.name == Tick._meta.indexes[0].name
    assert isinstance(add, AddIndex) and add.index == RingSlots.for_table(TABLE, NEW_CAPACITY)
    text = MigrationWriter(migration).as_string()
    assert f"dbqueue_django.slots.RingSlots(capacity={NEW_CAPACITY}, name=" in text


def test_a_capacity_change_on_an_empty_ring(alias: str, resize: Resize) -> None:
    queue = Tick.queue.using(alias)
    used = queue.push_many([{"symbol": f"S{i}", "price": Decimal(i)} for i in range(5)])
    queue.ack(queue.pop_batch(5))
    failed = _fail_for_good(alias)
    first = next_number(alias)
    assert first > max(used)

    resize.apply()
    # Both counters go on from one number above every number used; the failed table stays.
    assert_fresh_slots(alias, NEW_CAPACITY, first)
    assert counters(alias) == {f"{TABLE}_push_seq", f"{TABLE}_pop_seq"}
    core, ex = resized_ring(alias)
    core.check(ex)
    assert core.push(ex, {"symbol": "NEW", "price": Decimal(1)}) == first
    assert core.retry(ex, [failed]) == 1  # pushed again under a new number
    assert [(m.id, m.payload["symbol"]) for m in core.pop_batch(ex, 5)] == [
        (first, "NEW"), (first + 1, "BAD"),
    ]  # fmt: skip
    assert core.stats(ex).capacity == NEW_CAPACITY


def test_a_capacity_change_migrates_back(alias: str, resize: Resize) -> None:
    resize.apply()
    core, ex = resized_ring(alias)
    pushed = core.push(ex, {"symbol": "X", "price": Decimal(1)})
    core.pop_batch(ex, 1, mode="at_most_once")
    resize.unapply()
    assert_fresh_slots(alias, CAPACITY, pushed + 1)
    Tick.queue.using(alias).check()


def test_a_capacity_change_on_a_non_empty_ring_fails_clearly(alias: str, resize: Resize) -> None:
    queue = Tick.queue.using(alias)
    number = queue.push(symbol="KEEP", price=Decimal(1))
    queue.push(symbol="LEASED", price=Decimal(2))
    queue.pop_batch(1)
    before = slots(alias)
    with pytest.raises(RingNotEmpty) as info:
        resize.apply()
    message = str(info.value)
    assert "'testapp_tick' holds 2 message(s) (1 ready, 1 leased" in message
    assert "Nothing was changed. Drain it first" in message
    assert "(manage.py runqueueworker <app_label.Model> --burst, run from the code" in message
    assert message.endswith("then run migrate again (see the ring queue how-to)")
    # The migration rolled back as a whole: same slots, same messages.
    assert slots(alias) == before
    assert [t.id for t in queue.items("leased")] == [number]
    assert [t.id for t in queue.items("ready")] == [number + 1]


def test_altering_a_payload_field_keeps_the_slots(alias: str) -> None:
    """SQLite alters a column by copying the table ("new__testapp_tick"): the slots, their
    messages and the counters must come through, and the index on seq be built again."""
    queue = Tick.queue.using(alias)
    (number,) = queue.push_many([{"symbol": "KEPT", "price": Decimal(1)}])
    loader = MigrationLoader(connections[alias])
    before = loader.project_state()
    after = before.clone()
    after.models["testapp", "tick"].fields["symbol"] = models.CharField(max_length=30, null=True)
    (migration,) = MigrationAutodetector(before, after).changes(graph=loader.graph)["testapp"]
    (alter,) = migration.operations
    assert isinstance(alter, AlterField)
    with connections[alias].schema_editor() as editor:
        migration.apply(before.clone(), editor)
    try:
        assert len(slots(alias)) == CAPACITY
        assert [(t.id, t.symbol) for t in queue.items()] == [(number, "KEPT")]
        assert counters(alias) == {f"{TABLE}_push_seq", f"{TABLE}_pop_seq"}
        assert queue.push(symbol="NEXT", price=Decimal(2)) == number + 1
        with connections[alias].cursor() as cursor:
            found = connections[alias].introspection.get_constraints(cursor, TABLE)
        seq_indexes = [c["columns"] for c in found.values() if c["index"] and not c["primary_key"]]
        assert seq_indexes == ([] if alias == "default" else [["seq"]])
    finally:
        with connections[alias].schema_editor() as editor:
            migration.unapply(before.clone(), editor)
    assert [t.symbol for t in queue.items()] == ["KEPT", "NEXT"]


# -- migrating backwards --------------------------------------------------------------------


def test_migrating_backwards_drops_everything(alias: str) -> None:
    Tick.queue.using(alias).push(symbol="GONE", price=Decimal(1))
    call_command("migrate", "testapp", "0001", database=alias, verbosity=0)
    try:
        tables = set(connections[alias].introspection.table_names())
        assert not {TABLE, f"{TABLE}_failed", f"{TABLE}_push_seq", f"{TABLE}_pop_seq"} & tables
        assert counters(alias) == set()
        if alias == "sqlite":
            assert query(alias, "SELECT name FROM sqlite_master WHERE name LIKE 'dbq_%_seq'") == []
    finally:
        call_command("migrate", "testapp", database=alias, verbosity=0)
    # And forwards again: a new ring, numbered from 0.
    assert_fresh_slots(alias, CAPACITY, 0)
    assert Tick.queue.using(alias).push(symbol="NEW", price=Decimal(1)) == 0


def _fail_for_good(alias: str) -> int:
    queue = Tick.queue.using(alias)
    number = queue.push(symbol="BAD", price=Decimal(1))
    for attempt in (1, 2):
        (item,) = queue.pop_batch(1)
        state = queue.fail(item, f"attempt {attempt}", delay=dt.timedelta(0))
        queue.rescue()
    assert state == {item.id: State.FAILED}
    assert queue.failed().get().id == item.id != number
    return int(item.id)


# -- a ring of many slots -------------------------------------------------------------------


def segments(alias: str) -> list[tuple[str, str, list[str]]]:
    """Each segment of Tick's slot table: its name, bounds and storage parameters."""
    return [(name, bounds, list(options)) for name, bounds, options in query(alias, f"""
        SELECT c.relname, pg_get_expr(c.relpartbound, c.oid), c.reloptions
        FROM pg_partition_tree('{TABLE}') AS t JOIN pg_class AS c ON c.oid = t.relid
        WHERE t.level = 1 ORDER BY c.relname
    """)]  # fmt: skip


def constraints(alias: str) -> list[tuple[str, str]]:
    """The slot table's constraints, by name and definition."""
    return query(alias, f"""
        SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint
        WHERE conrelid = '{TABLE}'::regclass ORDER BY conname
    """)  # fmt: skip


@pytest.mark.postgresql
def test_a_ring_of_many_slots_keeps_them_in_segments() -> None:
    """More slots than compaction copies under one lock: the slot table is split into
    segments, each with the ring's storage parameters, and the constraints keep their names;
    a capacity change back to a few slots makes it one table again."""
    alias, big = "default", SEGMENT_SLOTS + 1
    before, migration = capacity_change(alias, big)
    named = constraints(alias)
    first = next_number(alias)
    with connections[alias].schema_editor(atomic=migration.atomic) as editor:
        migration.apply(before.clone(), editor)
    try:
        half = big // 2
        found = segments(alias)
        assert [(name, bounds) for name, bounds, _ in found] == [
            (f"{TABLE}_s0", f"FOR VALUES FROM (0) TO ({half})"),
            (f"{TABLE}_s1", f"FOR VALUES FROM ({half}) TO ({big})"),
        ]
        assert all("fillfactor=10" in options for _, _, options in found)
        # After a migrate, the tuning of a model that declares another capacity (8 slots, one
        # table) leaves the segments alone: a partitioned table takes no storage parameters.
        tune_tables(apps.get_app_config("testapp"), alias)
        assert segments(alias) == found
        assert constraints(alias) == named
        assert_fresh_slots(alias, big, first)
        spec = Tick.queue.spec
        ex = DjangoExecutor(alias)
        core = RingQueue(replace(spec, options=replace(spec.options, capacity=big)), ex.dialect)
        core.check(ex)
        pushed = core.push_many(ex, [{"symbol": f"S{i}", "price": Decimal(i)} for i in range(3)])
        assert [m.id for m in core.pop_batch(ex, 3)] == pushed
        result = while_held(lambda: core.compact(ex))
        assert result.compacted, result
        assert core.stats(ex).leased == 3
        core.purge(ex)
    finally:
        with connections[alias].schema_editor(atomic=migration.atomic) as editor:
            migration.unapply(before.clone(), editor)
    assert segments(alias) == []
    assert query(alias, f"SELECT relkind FROM pg_class WHERE relname = '{TABLE}'") == [("r",)]
    assert constraints(alias) == named
    assert len(slots(alias)) == CAPACITY
    Tick.queue.using(alias).check()


# -- the side table's states --------------------------------------------------------------------


@pytest.mark.postgresql
def test_the_spilled_state_is_an_alter_field_that_runs_no_sql() -> None:
    """The failed models' state choices gained "spilled": makemigrations writes an AlterField
    per ring (0007 in the test app), and applying it changes nothing in the database."""
    loader = MigrationLoader(connections["default"])
    before = loader.project_state(("testapp", "0006_meta_on_delete_cascade"))
    after = loader.project_state(("testapp", "0007_failed_state_spilled"))
    changes = MigrationAutodetector(before, after).changes(graph=loader.graph)
    (migration,) = changes["testapp"]
    assert {(op.model_name, op.name) for op in migration.operations} == {
        ("ringjobfailed", "state"), ("tickfailed", "state"),
    }  # fmt: skip
    assert all(isinstance(op, AlterField) for op in migration.operations)
    assert all((4, "spilled") in op.field.choices for op in migration.operations)
    with connections["default"].schema_editor(collect_sql=True, atomic=False) as editor:
        migration.apply(before.clone(), editor)
    assert editor.collected_sql == []


@pytest.mark.postgresql
def test_the_cancelled_states_are_an_alter_field_that_runs_no_sql() -> None:
    """The split meta models' state choices gained "cancelled" and "cancelling": an
    AlterField per split queue (0008 in the test app) that changes nothing in the database
    (cancellation needs no DDL)."""
    loader = MigrationLoader(connections["default"])
    before = loader.project_state(("testapp", "0007_failed_state_spilled"))
    after = loader.project_state(("testapp", "0008_cancelled_states"))
    changes = MigrationAutodetector(before, after).changes(graph=loader.graph)
    (migration,) = changes["testapp"]
    assert {(op.model_name, op.name) for op in migration.operations} == {
        ("jobqueuemeta", "state"), ("keptjobqueuemeta", "state"), ("pingqueuemeta", "state"),
    }  # fmt: skip
    assert all(isinstance(op, AlterField) for op in migration.operations)
    assert all((5, "cancelled") in op.field.choices for op in migration.operations)
    with connections["default"].schema_editor(collect_sql=True, atomic=False) as editor:
        migration.apply(before.clone(), editor)
    assert editor.collected_sql == []
