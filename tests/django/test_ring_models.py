"""RingQueueModel: the generated ``<Model>Failed`` model, the slot table's nullable payload,
the RingSlots index, what ``makemigrations`` writes and what ``migrate`` (and ``flush``) leave
in the database: the slots, the counters, the SQLite index on seq, PostgreSQL's storage
parameters."""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.core.management import call_command
from django.core.management.commands import flush
from django.db import connections, models
from django.test.utils import isolate_apps, override_settings

from dbqueue.schema import RING_FILLFACTOR, RING_NEVER_ANALYZE
from dbqueue.spec import index_name
from dbqueue_django.models import RingQueueModel
from dbqueue_django.slots import RingSlots
from tests.django.aliases import ALIASES
from tests.django.testapp.models import Tick

DJANGO_DB = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])
pytestmark = pytest.mark.django
TABLE, CAPACITY = "testapp_tick", 8
PAYLOAD = ["symbol", "price", "volume", "note"]


def query(alias: str, sql: str) -> list[tuple[Any, ...]]:
    with connections[alias].cursor() as cursor:
        cursor.execute(sql)
        return cursor.fetchall()


def slots(alias: str, table: str = TABLE) -> list[tuple[int, int, int]]:
    """(slot, seq, state) of every slot, in slot order."""
    return [(int(a), int(b), int(c)) for a, b, c in query(
        alias, f'SELECT slot, seq, state FROM "{table}" ORDER BY slot'
    )]  # fmt: skip


def counters(alias: str, table: str = TABLE) -> set[str]:
    """The ring's counters that exist: sequences (PostgreSQL) or one-row tables (SQLite)."""
    names = {f"{table}_push_seq", f"{table}_pop_seq"}
    if alias == "default":
        found = query(alias, "SELECT relname FROM pg_class WHERE relkind = 'S'")
    else:
        found = query(alias, "SELECT name FROM sqlite_master WHERE type = 'table'")
    return names & {r[0] for r in found}


# -- the generated models --------------------------------------------------------------------


def test_the_failed_model_is_generated_in_the_same_app() -> None:
    failed = Tick.failed_model
    assert failed._meta.label == "testapp.TickFailed"
    assert failed._meta.db_table == "testapp_tick_failed"
    assert apps.get_model("testapp", "TickFailed") is failed
    assert failed.ring_model is Tick  # type: ignore[attr-defined]
    assert [f.name for f in failed._meta.fields] == [
        "id", "state", "attempts", "pushed_at", "failed_at", "run_at", "lease_until",
        "last_error", *PAYLOAD,
    ]  # fmt: skip


def test_payload_columns_are_nullable_in_the_slot_table_only() -> None:
    ring = {f.name: f.null for f in Tick._meta.fields}
    failed = {f.name: f.null for f in Tick.failed_model._meta.fields}
    assert all(ring[name] for name in PAYLOAD)
    assert {name: failed[name] for name in PAYLOAD} == {
        "symbol": False, "price": False, "volume": False, "note": True,
    }  # fmt: skip
    # The spec (what a push is checked against) keeps the declared nullability.
    assert {f.name: f.nullable for f in Tick.queue.spec.fields} == {
        "symbol": False, "price": False, "volume": False, "note": True,
    }  # fmt: skip


def test_the_ring_slots_index_carries_the_capacity() -> None:
    (index,) = Tick._meta.indexes
    assert isinstance(index, RingSlots)
    assert index.name == index_name(TABLE, "seq") and len(index.name) <= 30
    assert index.deconstruct() == (
        "dbqueue_django.slots.RingSlots", (), {"capacity": CAPACITY, "name": index.name},
    )  # fmt: skip
    assert index.clone() == index
    assert index != RingSlots(capacity=CAPACITY * 2, name=index.name)


def test_an_abstract_ring_model_generates_nothing_but_its_subclasses_do() -> None:
    with isolate_apps("tests.django.testapp") as isolated:

        class Feed(RingQueueModel):
            source = models.CharField(max_length=20)

            class Meta:
                abstract = True

        class Quote(Feed):
            class Meta:
                app_label = "testapp"

            class QueueOptions:
                capacity = 32

        assert not hasattr(Feed, "failed_model")
        assert isolated.get_model("testapp", "QuoteFailed") is Quote.failed_model
        assert Quote._meta.get_field("source").null
        assert not Quote.failed_model._meta.get_field("source").null
        assert [i.capacity for i in Quote._meta.indexes] == [32]  # type: ignore[attr-defined]


def test_a_ring_without_capacity_gets_no_slots_index() -> None:
    with isolate_apps("tests.django.testapp"):

        class Unbounded(RingQueueModel):
            class Meta:
                app_label = "testapp"

        assert Unbounded._meta.indexes == []  # the system check reports it (E001)


# -- what makemigrations writes -------------------------------------------------------------


@pytest.fixture
def empty_migrations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The test app's migrations moved to an empty package: makemigrations starts afresh."""
    package = tmp_path / "fresh_migrations"
    package.mkdir()
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    with override_settings(MIGRATION_MODULES={"testapp": "fresh_migrations"}):
        yield
    sys.modules.pop("fresh_migrations", None)


@pytest.mark.django_db  # makemigrations checks the history of the default database
def test_makemigrations_writes_the_slots_and_the_failed_table(empty_migrations: None) -> None:
    out = io.StringIO()
    call_command("makemigrations", "testapp", "--dry-run", verbosity=3, stdout=out)
    migration = out.getvalue()
    assert "import dbqueue_django.slots" in migration
    name = index_name(TABLE, "seq")
    assert f"dbqueue_django.slots.RingSlots(capacity=8, name='{name}')" in migration
    assert "name='TickFailed'" in migration and "'db_table': 'testapp_tick_failed'" in migration
    assert "('symbol', models.CharField(max_length=12, null=True))" in migration
    assert "('symbol', models.CharField(max_length=12))" in migration  # the failed table's


@DJANGO_DB
@pytest.mark.parametrize("alias", ALIASES)
def test_sqlmigrate_shows_the_core_statements(alias: str) -> None:
    out = io.StringIO()
    call_command("sqlmigrate", "testapp", "0002", database=alias, stdout=out)
    sql = out.getvalue()
    assert 'CREATE TABLE "testapp_tick"' in sql and 'CREATE TABLE "testapp_tick_failed"' in sql
    assert 'INSERT INTO "testapp_tick" (slot, seq' in sql
    if alias == "default":
        assert 'CREATE SEQUENCE "testapp_tick_push_seq"' in sql
        # Set before the slots are inserted, so that the INSERT leaves the pages' free space.
        tuned = sql.index(f"fillfactor = {RING_FILLFACTOR}")
        assert tuned < sql.index('INSERT INTO "testapp_tick"')
    else:
        assert 'CREATE TABLE "testapp_tick_pop_seq" (value integer NOT NULL)' in sql
        assert f'CREATE INDEX "{index_name(TABLE, "seq")}"' in sql


# -- what migrate leaves in the database ----------------------------------------------------


@DJANGO_DB
@pytest.mark.parametrize("alias", ALIASES)
def test_migrate_preallocates_the_slots(alias: str) -> None:
    found = slots(alias)
    assert [s for s, _, _ in found] == list(range(CAPACITY))
    first = min(seq for _, seq, _ in found) + CAPACITY  # the next number to be pushed
    # Slot mod(p, C) holds p - C for the first number p it will receive.
    expected = {p % CAPACITY: p - CAPACITY for p in range(first, first + CAPACITY)}
    assert {slot: seq for slot, seq, _ in found} == expected
    assert {state for _, _, state in found} == {0}
    assert counters(alias) == {f"{TABLE}_push_seq", f"{TABLE}_pop_seq"}


@DJANGO_DB
@pytest.mark.parametrize("alias", ALIASES)
def test_the_slot_table_is_indexed_by_seq_on_sqlite_only(alias: str) -> None:
    connection = connections[alias]
    with connection.cursor() as cursor:
        found = connection.introspection.get_constraints(cursor, TABLE)
    indexes = {name for name, c in found.items() if c["index"] and not c["primary_key"]}
    # PostgreSQL: no index on a changing column, so every update of a slot is HOT. SQLite has
    # no HOT updates: there the index on seq makes the pop a range scan.
    assert indexes == (set() if alias == "default" else {index_name(TABLE, "seq")})


@DJANGO_DB
@pytest.mark.postgresql
def test_migrate_tunes_the_ring_table() -> None:
    (options,) = query("default", f"SELECT reloptions FROM pg_class WHERE relname = '{TABLE}'")[0]
    assert set(options) == {
        f"fillfactor={RING_FILLFACTOR}", "autovacuum_vacuum_scale_factor=0",
        "autovacuum_vacuum_threshold=1000", "autovacuum_vacuum_cost_delay=0",
        "autovacuum_analyze_scale_factor=0",
        f"autovacuum_analyze_threshold={RING_NEVER_ANALYZE}",
    }  # fmt: skip


@DJANGO_DB
@pytest.mark.parametrize("alias", ALIASES)
def test_flush_gets_the_slots_back_and_numbering_goes_on(alias: str) -> None:
    queue = Tick.queue.using(alias)
    numbers = queue.push_many([{"symbol": "A", "price": 1}] * 3)
    # Django's own flush (the suite's, tests.django.flushing, would do the same more cheaply).
    call_command(flush.Command(), database=alias, interactive=False, verbosity=0)
    assert len(slots(alias)) == CAPACITY and queue.stats()["ready"] == 0
    assert queue.push(symbol="B", price=2) > numbers[-1]
