"""create_statements on real PostgreSQL and SQLite: both tables, the partial indexes, and on
PostgreSQL the storage parameters of tuning_statements; a ring's segments on PostgreSQL."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from itertools import pairwise

import psycopg
import pytest

from dbqueue.dialects import PostgreSQL, SQLite
from dbqueue.schema import (
    MAX_SEGMENTS,
    SEGMENT_SLOTS,
    create_ring_statements,
    create_statements,
    drop_ring_statements,
    reset_statements,
    ring_segment_bounds,
    ring_segments_statement,
    ring_storage_parameters,
    storage_parameters,
    tuning_statements,
)
from dbqueue.spec import Field, FieldKind, QueueOptions, QueueSpec
from dbqueue.upkeep.compaction import MAX_ROWS

K = FieldKind
FIELDS = (
    Field("title", K.TEXT, max_length=80),
    Field("body", K.TEXT, nullable=True),
    Field("n", K.INTEGER),
    Field("amount", K.DECIMAL, max_digits=8, decimal_places=2, nullable=True),
    Field("doc", K.JSON, nullable=True),
    Field("uid", K.UUID, nullable=True),
)


def spec_for(table: str) -> QueueSpec:
    return QueueSpec(table, FIELDS)


# -- PostgreSQL ---------------------------------------------------------------------------------


@pytest.fixture
def pg_spec(pg_conn: psycopg.Connection, table_name: str) -> Iterator[QueueSpec]:
    spec = spec_for(table_name)
    for statement in create_statements(spec, PostgreSQL()):
        pg_conn.execute(statement)
    yield spec
    pg_conn.execute(
        f'DROP TABLE IF EXISTS "{spec.table}", "{spec.meta_table}", "{spec.head_table}"'
    )


def _pg_columns(conn: psycopg.Connection, table: str) -> dict[str, tuple[str, str]]:
    rows = conn.execute(
        "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
        "WHERE table_schema = current_schema() AND table_name = %s ORDER BY ordinal_position",
        (table,),
    ).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


@pytest.mark.postgresql
def test_postgresql_creates_both_tables(pg_conn: psycopg.Connection, pg_spec: QueueSpec) -> None:
    data = _pg_columns(pg_conn, pg_spec.table)
    assert list(data) == ["id", "title", "body", "n", "amount", "doc", "uid", "enqueued_at",
                          "last_error"]  # fmt: skip
    assert data["title"] == ("character varying", "NO")
    assert data["body"] == ("text", "YES")
    assert data["doc"][0] == "jsonb" and data["uid"][0] == "uuid"
    assert data["amount"][0] == "numeric"
    assert data["enqueued_at"] == ("timestamp with time zone", "NO")
    meta = _pg_columns(pg_conn, pg_spec.meta_table)
    assert list(meta) == ["id", "state", "priority", "run_at", "attempts", "lease_until"]
    assert meta["state"] == ("smallint", "NO") and meta["lease_until"][1] == "YES"


@pytest.mark.postgresql
def test_postgresql_has_no_foreign_key_between_the_tables(
    pg_conn: psycopg.Connection, pg_spec: QueueSpec
) -> None:
    # The design forbids it: foreign-key checks have caused deadlocks in batch dequeue.
    rows = pg_conn.execute(
        "SELECT conname FROM pg_constraint WHERE contype = 'f' AND conrelid IN "
        "(%s::regclass, %s::regclass)",
        (f'"{pg_spec.table}"', f'"{pg_spec.meta_table}"'),
    ).fetchall()
    assert rows == []


@pytest.mark.postgresql
def test_postgresql_partial_indexes(pg_conn: psycopg.Connection, pg_spec: QueueSpec) -> None:
    rows: dict[str, str] = dict(
        pg_conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s",
            (pg_spec.meta_table,),
        ).fetchall()
    )
    ready, leased = pg_spec.index_name("ready"), pg_spec.index_name("leased")
    assert ready in rows and leased in rows
    assert "(priority DESC, run_at, id)" in rows[ready]
    assert rows[ready].endswith("WHERE (state = 0)")
    assert "(lease_until)" in rows[leased]
    assert rows[leased].endswith("WHERE (state = 1)")
    assert len(rows) == 3  # and the primary key


@pytest.mark.postgresql
def test_postgresql_storage_parameters_are_applied(
    pg_conn: psycopg.Connection, pg_spec: QueueSpec
) -> None:
    def reloptions(table: str) -> set[str]:
        row = pg_conn.execute(
            "SELECT reloptions FROM pg_class WHERE oid = %s::regclass", (f'"{table}"',)
        ).fetchone()
        assert row is not None
        return set(row[0] or [])

    meta = reloptions(pg_spec.meta_table)
    assert {"fillfactor=80", "autovacuum_vacuum_scale_factor=0.01",
            "autovacuum_vacuum_threshold=1000", "autovacuum_analyze_scale_factor=0.02",
            "autovacuum_vacuum_cost_delay=0"} <= meta  # fmt: skip
    data = reloptions(pg_spec.table)
    assert {"autovacuum_vacuum_scale_factor=0.01",
            "autovacuum_vacuum_insert_scale_factor=0.05"} <= data  # fmt: skip


@pytest.mark.postgresql
def test_the_catalog_holds_the_declared_parameters_and_reset_clears_them(
    pg_conn: psycopg.Connection, pg_spec: QueueSpec, table_name: str
) -> None:
    # A migration tool compares storage_parameters() with pg_class.reloptions as they are,
    # and undoes them with reset_statements(): both from one declaration, no SQL parsed.
    ring = QueueSpec(f"{table_name}_r", FIELDS, QueueOptions(capacity=100))
    for statement in create_ring_statements(ring, PostgreSQL()):
        pg_conn.execute(statement)
    declared = [
        *storage_parameters(pg_spec, PostgreSQL()),
        *ring_storage_parameters(ring, PostgreSQL()),
    ]

    def reloptions(table: str) -> dict[str, str]:
        row = pg_conn.execute(
            "SELECT reloptions FROM pg_class WHERE oid = %s::regclass", (f'"{table}"',)
        ).fetchone()
        assert row is not None
        return dict(item.split("=", 1) for item in row[0] or [])

    for table, parameters in declared:
        assert reloptions(table) == parameters
    for statement in reset_statements(declared, PostgreSQL()):
        pg_conn.execute(statement)
    assert all(reloptions(table) == {} for table, _ in declared)
    for statement in drop_ring_statements(ring, PostgreSQL()):
        pg_conn.execute(statement)


@pytest.mark.postgresql
def test_postgresql_tuning_can_be_applied_again(
    pg_conn: psycopg.Connection, pg_spec: QueueSpec
) -> None:
    # Applied after every migrate: it must be idempotent.
    for statement in tuning_statements(pg_spec, PostgreSQL()):
        pg_conn.execute(statement)


@pytest.mark.postgresql
def test_postgresql_ids_come_from_the_data_table_identity(
    pg_conn: psycopg.Connection, pg_spec: QueueSpec
) -> None:
    first = pg_conn.execute(
        f'INSERT INTO "{pg_spec.table}" (title, n) VALUES (%s, %s) RETURNING id', ("a", 1)
    ).fetchone()
    second = pg_conn.execute(
        f'INSERT INTO "{pg_spec.table}" (title, n) VALUES (%s, %s) RETURNING id', ("b", 2)
    ).fetchone()
    assert first is not None and second is not None and second[0] > first[0]


def test_tuning_is_postgresql_only() -> None:
    assert tuning_statements(spec_for("t"), SQLite()) == []
    assert len(tuning_statements(spec_for("t"), PostgreSQL())) == 2
    sqlite_ddl = "\n".join(create_statements(spec_for("t"), SQLite()))
    assert "fillfactor" not in sqlite_ddl and "ALTER TABLE" not in sqlite_ddl


# -- SQLite -------------------------------------------------------------------------------------


@pytest.fixture
def sqlite_spec(sqlite_conn: sqlite3.Connection, table_name: str) -> QueueSpec:
    spec = spec_for(table_name)
    for statement in create_statements(spec, SQLite()):
        sqlite_conn.execute(statement)
    return spec


@pytest.mark.sqlite
def test_sqlite_creates_both_tables(
    sqlite_conn: sqlite3.Connection, sqlite_spec: QueueSpec
) -> None:
    tables = {
        r[0] for r in sqlite_conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
    }
    assert {sqlite_spec.table, sqlite_spec.meta_table} <= tables

    def columns(table: str) -> dict[str, tuple[str, int]]:
        rows = sqlite_conn.execute(f'PRAGMA table_info("{table}")').fetchall()
        return {r[1]: (r[2].lower(), r[3]) for r in rows}

    data = columns(sqlite_spec.table)
    assert list(data) == ["id", "title", "body", "n", "amount", "doc", "uid", "enqueued_at",
                          "last_error"]  # fmt: skip
    assert data["title"] == ("varchar(80)", 1) and data["body"] == ("text", 0)
    assert data["uid"][0] == "char(32)" and data["enqueued_at"][0] == "datetime"
    meta = columns(sqlite_spec.meta_table)
    assert list(meta) == ["id", "state", "priority", "run_at", "attempts", "lease_until"]


@pytest.mark.sqlite
def test_sqlite_partial_indexes(sqlite_conn: sqlite3.Connection, sqlite_spec: QueueSpec) -> None:
    rows = dict(
        sqlite_conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ?",
            (sqlite_spec.meta_table,),
        ).fetchall()
    )
    ready, leased = sqlite_spec.index_name("ready"), sqlite_spec.index_name("leased")
    assert rows[ready].endswith("(priority DESC, run_at, id) WHERE state = 0")
    assert rows[leased].endswith("(lease_until) WHERE state = 1")
    # SQLite really treats them as partial indexes.
    partial = {
        r[1]: r[4] for r in sqlite_conn.execute(f'PRAGMA index_list("{sqlite_spec.meta_table}")')
    }
    assert partial[ready] == 1 and partial[leased] == 1


@pytest.mark.sqlite
def test_sqlite_ready_index_serves_the_pop(
    sqlite_conn: sqlite3.Connection, sqlite_spec: QueueSpec
) -> None:
    plan = " ".join(
        str(r[-1])
        for r in sqlite_conn.execute(
            f'EXPLAIN QUERY PLAN SELECT id FROM "{sqlite_spec.meta_table}" WHERE state = 0 '
            f"AND run_at <= ? ORDER BY priority DESC, run_at, id LIMIT 10",
            ("2026-01-01 00:00:00.000000",),
        )
    )
    assert sqlite_spec.index_name("ready") in plan and "TEMP B-TREE" not in plan


@pytest.mark.sqlite
def test_sqlite_creating_twice_fails_loudly(
    sqlite_conn: sqlite3.Connection, sqlite_spec: QueueSpec
) -> None:
    with pytest.raises(sqlite3.OperationalError, match="already exists"):
        sqlite_conn.execute(create_statements(sqlite_spec, SQLite())[0])


@pytest.mark.sqlite
def test_sqlite_ids_autoincrement(sqlite_conn: sqlite3.Connection, sqlite_spec: QueueSpec) -> None:
    # AUTOINCREMENT: an id is never reused after the newest row is deleted (acked), so a stale
    # lease token cannot match a new message.
    t = sqlite_spec.table
    sqlite_conn.execute(f'INSERT INTO "{t}" (title, n) VALUES (?, ?)', ("a", 1))
    first = sqlite_conn.execute(f'SELECT max(id) FROM "{t}"').fetchone()[0]
    sqlite_conn.execute(f'DELETE FROM "{t}"')
    sqlite_conn.execute(f'INSERT INTO "{t}" (title, n) VALUES (?, ?)', ("b", 2))
    assert sqlite_conn.execute(f'SELECT max(id) FROM "{t}"').fetchone()[0] > first


# -- a ring's segments ----------------------------------------------------------------------------


def test_a_ring_takes_as_few_segments_as_keep_each_under_one_compaction() -> None:
    s = SEGMENT_SLOTS
    assert ring_segment_bounds(1) == ring_segment_bounds(s) == []
    assert ring_segment_bounds(s + 1) == [0, s // 2, s + 1]
    assert ring_segment_bounds(3 * s) == [0, s, 2 * s, 3 * s]
    most = ring_segment_bounds(MAX_SEGMENTS * s)
    assert len(most) == MAX_SEGMENTS + 1 and max(b - a for a, b in pairwise(most)) == s
    # Past that, larger segments: up to what one compaction copies, then more than that.
    larger = ring_segment_bounds(MAX_SEGMENTS * MAX_ROWS)
    assert len(larger) == MAX_SEGMENTS + 1 and max(b - a for a, b in pairwise(larger)) == MAX_ROWS
    assert len(ring_segment_bounds(1_000_000)) == MAX_SEGMENTS + 1


@pytest.mark.postgresql
def test_postgresql_segments_keep_the_tables_constraints_and_indexes(
    pg_conn: psycopg.Connection, table_name: str
) -> None:
    """The block that splits an empty slot table into segments, or makes it one table again,
    rebuilds it with the same columns, and the same constraints and indexes by name."""
    dialect = PostgreSQL()
    spec = QueueSpec(table_name, (Field("n", K.INTEGER),), QueueOptions(capacity=10))
    for statement in create_ring_statements(spec, dialect):
        pg_conn.execute(statement)
    t = f'"{table_name}"'
    pg_conn.execute(f"DELETE FROM {t}")
    pg_conn.execute(f'ALTER TABLE {t} ADD CONSTRAINT "{table_name}_n" CHECK (n > 0)')
    pg_conn.execute(f'CREATE INDEX "{table_name}_by_n" ON {t} (n)')

    def shape() -> tuple[str, list[tuple[str, ...]], list[str], list[str]]:
        (kind,) = pg_conn.execute(f"SELECT relkind FROM pg_class WHERE oid = '{t}'::regclass")
        defs = pg_conn.execute(
            f"SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
            f"WHERE conrelid = '{t}'::regclass ORDER BY 1"
        ).fetchall()
        indexes = pg_conn.execute(
            f"SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = '{t}'::regclass "
            "ORDER BY 1"
        ).fetchall()
        parts = pg_conn.execute(
            f"SELECT relid::text FROM pg_partition_tree('{t}') WHERE level = 1 ORDER BY 1"
        ).fetchall()
        return kind[0], defs, [i for (i,) in indexes], [p for (p,) in parts]

    kind, defs, indexes, parts = shape()
    assert kind == "r" and parts == []
    try:
        for bounds in ([0, 4, 10], [0, 3, 6, 10], []):
            pg_conn.execute(ring_segments_statement(spec, dialect, bounds))
            after = shape()
            assert after[0] == ("p" if bounds else "r")
            assert after[1:3] == (defs, indexes)
            assert after[3] == [f"{table_name}_s{i}" for i in range(len(bounds) - 1)]
            pg_conn.execute(
                f"INSERT INTO {t} (slot, seq, n) SELECT s, s, 1 FROM generate_series(0, 9) AS s"
            )
            with pytest.raises(psycopg.errors.CheckViolation):
                pg_conn.execute(f"INSERT INTO {t} (slot, seq, n) VALUES (10, 10, 0)")
            pg_conn.execute(f"DELETE FROM {t}")
    finally:
        for statement in drop_ring_statements(spec, dialect):
            pg_conn.execute(statement)
