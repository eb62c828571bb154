"""A ring's Django migration and the core DDL describe the same tables.

The core's ring for ``Tick``'s spec (``create_ring_statements``) is created under another name
(``parity_tick``) next to the migrated ``testapp_tick``, and the two are compared as the
database reports them: both tables' columns, the slots, the counters, the index on seq (SQLite)
and the storage parameters (PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connections

from dbqueue.schema import create_ring_statements, drop_ring_statements
from dbqueue.spec import QueueSpec
from dbqueue_django.executor import dialect_for
from tests.django.aliases import ALIASES
from tests.django.test_parity import columns, numeric_defaults, query
from tests.django.testapp.models import Tick

pytestmark = [
    pytest.mark.django,
    pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
]
DJANGO, CORE = "testapp_tick", "parity_tick"


@contextmanager
def core_ring_copy(alias: str, source: QueueSpec, table: str) -> Iterator[QueueSpec]:
    """The core's ring (its consumer groups' tables too) for ``source``'s fields and options,
    named ``table``, on ``alias``; dropped at the end."""
    spec = QueueSpec(table, source.fields, source.options)
    dialect = dialect_for(connections[alias])
    with connections[alias].cursor() as cursor:
        for statement in create_ring_statements(spec, dialect):
            cursor.execute(statement)
    try:
        yield spec
    finally:
        with connections[alias].cursor() as cursor:
            for statement in drop_ring_statements(spec, dialect):
                cursor.execute(statement)


@pytest.fixture
def core_ring(alias: str) -> Iterator[QueueSpec]:
    """The core's ring for Tick's spec, named ``parity_tick``, on ``alias``."""
    with core_ring_copy(alias, Tick.queue.spec, CORE) as spec:
        yield spec


def counter(alias: str, name: str) -> tuple[Any, ...]:
    """How a counter is defined: a sequence's type and bounds, or a one-row table's columns."""
    if alias == "default":
        (row,) = query(
            alias,
            "SELECT data_type, min_value, increment_by, cycle FROM pg_sequences "
            "WHERE sequencename = %s",
            [name],
        )
        return tuple(row)
    return tuple(tuple(r[1:]) for r in query(alias, f'PRAGMA table_info("{name}")'))


def slot_shape(alias: str, table: str) -> tuple[int, set[int], set[int]]:
    """(slot count, the states, each slot's seq modulo the capacity minus the slot)."""
    rows = query(alias, f'SELECT slot, seq, state FROM "{table}"')
    capacity = len(rows)
    return capacity, {r[2] for r in rows}, {(r[1] - r[0]) % capacity for r in rows}


@pytest.mark.parametrize("alias", ALIASES)
def test_the_slot_tables_agree(alias: str, core_ring: QueueSpec) -> None:
    django, core = columns(alias, DJANGO), columns(alias, CORE)
    assert set(django) == {
        "slot", "seq", "state", "attempts", "pushed_at", "lease_until", "last_error",
        *Tick.queue.spec.field_names,
    }  # fmt: skip
    assert django == core
    assert numeric_defaults(alias, DJANGO) == numeric_defaults(alias, CORE)
    assert set(numeric_defaults(alias, DJANGO)) == {"state", "attempts"}
    assert slot_shape(alias, DJANGO) == slot_shape(alias, CORE) == (8, {0}, {0})


@pytest.mark.parametrize("alias", ALIASES)
def test_the_failed_tables_agree(alias: str, core_ring: QueueSpec) -> None:
    django = columns(alias, f"{DJANGO}_failed")
    assert django == columns(alias, core_ring.failed_table)
    assert {name for name, (nullable, *_) in django.items() if nullable} == {
        "pushed_at", "run_at", "lease_until", "last_error", "note",
    }  # fmt: skip


@pytest.mark.parametrize("alias", ALIASES)
def test_the_counters_agree(alias: str, core_ring: QueueSpec) -> None:
    for suffix in ("push_seq", "pop_seq"):
        assert counter(alias, f"{DJANGO}_{suffix}") == counter(alias, f"{CORE}_{suffix}")


@pytest.mark.parametrize("alias", ALIASES)
def test_the_indexes_agree(alias: str, core_ring: QueueSpec) -> None:
    connection = connections[alias]
    with connection.cursor() as cursor:
        django = connection.introspection.get_constraints(cursor, DJANGO)
        core = connection.introspection.get_constraints(cursor, CORE)

    def shape(found: dict[str, Any]) -> list[tuple[Any, ...]]:
        return sorted((c["columns"], c["primary_key"], c["unique"]) for c in found.values())

    assert shape(django) == shape(core)


@pytest.mark.parametrize("alias", ALIASES[:1])  # PostgreSQL's
def test_the_storage_parameters_agree(alias: str, core_ring: QueueSpec) -> None:
    sql = "SELECT reloptions FROM pg_class WHERE relname = %s"
    assert query(alias, sql, [DJANGO]) == query(alias, sql, [CORE]) != [(None,)]
