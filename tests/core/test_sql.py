"""The named SQL files: the same statements in every dialect, fully rendered, identifiers quoted,
and every statement valid SQL for its database (checked with EXPLAIN on real tables)."""

from __future__ import annotations

import datetime as dt
import re
import sqlite3
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from dbqueue.codec import Codec
from dbqueue.dialects import DIALECTS, PostgreSQL, SQLite
from dbqueue.errors import InvalidSpec
from dbqueue.schema import create_statements, drop_statements
from dbqueue.spec import Field, FieldKind, QueueOptions, QueueSpec
from dbqueue.sql import load, render

K = FieldKind
SAMPLE_FIELDS = (
    Field("k_small", K.SMALLINT, min_value=0),
    Field("k_int", K.INTEGER, nullable=True),
    Field("k_big", K.BIGINT, default=0),
    Field("k_float", K.FLOAT),
    Field("k_dec", K.DECIMAL, max_digits=10, decimal_places=3),
    Field("k_chars", K.TEXT, max_length=40),
    Field("k_text", K.TEXT, nullable=True),
    Field("k_bool", K.BOOLEAN),
    Field("k_when", K.DATETIME),
    Field("k_day", K.DATE),
    Field("k_doc", K.JSON, nullable=True),
    Field("k_blob", K.BYTES),
    Field("k_uid", K.UUID),
)
assert {f.kind for f in SAMPLE_FIELDS} == set(FieldKind)
SAMPLE_PAYLOAD: dict[str, Any] = {
    "k_small": 1, "k_int": 2, "k_big": 3, "k_float": 1.5, "k_dec": Decimal("1.250"),
    "k_chars": "c", "k_text": "t", "k_bool": True,
    "k_when": dt.datetime(2026, 1, 1, tzinfo=dt.UTC), "k_day": dt.date(2026, 1, 1),
    "k_doc": {"a": 1}, "k_blob": b"\x00", "k_uid": uuid.UUID(int=1),
}  # fmt: skip
LAYOUTS = ["split"]
PG_PARAM = re.compile(r"%\((\w+)\)[sb]")
SQLITE_PARAM = re.compile(r"(?<![:\w]):([a-z_]\w*)")


def sample_spec(table: str = "sample_q", *, unique: bool = False) -> QueueSpec:
    """The sample queue; ``unique``: with unique items (keys of all three scopes' statements
    are the same but for their predicate: one scope is enough to check they are valid)."""
    options = QueueOptions(unique_scope="unfinished") if unique else QueueOptions()
    return QueueSpec(table, SAMPLE_FIELDS, options)


def all_parts(spec: QueueSpec, dialect: Any, layout: str = "split") -> Iterator[tuple[str, str]]:
    for name, stmt in render(spec, dialect, layout).items():
        for part in stmt.parts:
            yield name, part


def compaction(layout: str) -> set[str]:
    """The upkeep statements (dbqueue.upkeep): PostgreSQL only, since SQLite keeps no dead
    versions; ``<layout>_vacuum`` and ``<layout>_compact`` are VACUUMs, which EXPLAIN cannot
    plan (tests/core/upkeep/ runs them). A split queue's heads too."""
    names = ["size", "vacuum", "kept", "compact"]
    if layout == "split":
        names += ["head_writers", "head_writing", "head_advance", "head_bands"]
    return {f"{layout}_{name}" for name in names}


#: The parts of the compaction statement that EXPLAIN cannot plan.
UNPLANNABLE = ("VACUUM",)


# -- the files ----------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_dialect_defines_the_same_statements(layout: str) -> None:
    names = {d: set(load(d, layout)) for d in DIALECTS}
    # Except what needs writable CTEs, which the core composes from other statements.
    ack_pops = {f"{layout}_ack_pop", f"{layout}_ack_pop_done"}
    # SQLite has no array parameters (the core pushes a unique batch row by row) and no
    # identity sequence (its unique push takes the AUTOINCREMENT's next id).
    unique = {"split_push_many_unique", "split_unique_id_sequence"}
    assert names["postgresql"] - ack_pops - unique - compaction(layout) == names["sqlite"]
    assert len(names["postgresql"]) >= 12
    for name in names["postgresql"]:
        assert name.startswith(f"{layout}_")


def test_the_split_layout_has_every_operation_the_queue_runs() -> None:
    expected = {"split_push", "split_push_many", "split_pop_leased", "split_pop_remove",
                "split_ack", "split_fail", "split_extend", "split_not_leased", "split_retry",
                "split_rescue", "split_next_due", "split_stats", "split_purge", "split_count",
                "split_delete",
                "split_notify", "split_release",
                "split_set_priority", "split_pushed",
                "split_cancel", "split_cancel_requested", "split_states", "split_ack_cancelling",
                "split_push_unique", "split_unique_holders",
                # keep_done's replacements of split_ack, split_pop_remove (KEEP_DONE_OPERATIONS)
                "split_ack_done", "split_pop_done"}  # fmt: skip
    # split_ack_pop needs writable CTEs (PostgreSQL); elsewhere the core runs ack + pop in one
    # transaction instead.
    postgresql_only = {"split_ack_pop", "split_ack_pop_done", "split_push_many_unique",
                       "split_unique_id_sequence"}  # fmt: skip
    postgresql_only |= compaction("split")
    assert set(load("postgresql", "split")) == expected | postgresql_only
    assert set(load("sqlite", "split")) == expected


#: The ring's statements on every dialect.
RING_COMMON = {
    "ring_push", "ring_push_blocked", "ring_pop_leased", "ring_pop_remove", "ring_ack",
    "ring_ack_side", "ring_fail", "ring_extend", "ring_extend_side", "ring_not_leased",
    "ring_sweep", "ring_sweep_side", "ring_next_due", "ring_retry", "ring_delete",
    "ring_delete_side", "ring_purge", "ring_purge_side", "ring_count", "ring_stats",
    "ring_counters",
    "ring_notify", "ring_release", "ring_spill",
}  # fmt: skip


def test_the_ring_layout_has_every_operation_the_queue_runs() -> None:
    # PostgreSQL: batch pushes in one statement, pushes in a caller's transaction locked first,
    # pop claims held across calls, a strict ack and ack_pop in one statement each (writable
    # CTEs), holes to mark, and set-based returns from the side table. SQLite (one writer,
    # transactional counters, no writable CTEs): a failed attempt of a message moved aside is
    # a statement of its own, and due messages go back one by one.
    postgresql_only = {
        "ring_push_many", "ring_push_locked", "ring_push_many_locked", "ring_pop_leased_held",
        "ring_pop_remove_held", "ring_ack_strict", "ring_ack_pop", "ring_ack_pop_held",
        "ring_mark_holes", "ring_sweep_holes", "ring_return",
    } | compaction("ring")  # fmt: skip
    sqlite_only = {
        "ring_next_slot", "ring_fail_side", "ring_release_side", "ring_due", "ring_return_one",
    }  # fmt: skip
    assert set(load("postgresql", "ring")) == RING_COMMON | postgresql_only
    assert set(load("sqlite", "ring")) == RING_COMMON | sqlite_only


def test_postgresql_runs_every_ring_operation_as_one_statement() -> None:
    for name, parts in load("postgresql", "ring").items():
        assert len(parts) == 1, name


@pytest.mark.parametrize("dialect", list(DIALECTS.values()), ids=list(DIALECTS))
def test_no_statement_is_empty_and_comments_are_dropped(dialect: Any) -> None:
    for name, parts in load(dialect.name, "split").items():
        assert parts, name
        for part in parts:
            assert part.strip() and not part.rstrip().endswith(";"), (name, part)
            assert all(not ln.lstrip().startswith("--") for ln in part.splitlines()), name


def test_postgresql_runs_every_operation_as_one_statement() -> None:
    for name, parts in load("postgresql", "split").items():
        assert len(parts) == 1, name


# -- rendering ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", list(DIALECTS.values()), ids=list(DIALECTS))
@pytest.mark.parametrize("fields", [SAMPLE_FIELDS, ()], ids=["every-kind", "no-fields"])
def test_rendered_statements_have_no_leftover_placeholders(dialect: Any, fields: Any) -> None:
    spec = QueueSpec("sample_q", fields)
    for name, part in all_parts(spec, dialect):
        assert "{" not in part and "}" not in part, (name, part)


@pytest.mark.parametrize("dialect", list(DIALECTS.values()), ids=list(DIALECTS))
def test_rendered_sql_quotes_every_identifier_from_the_spec(dialect: Any) -> None:
    spec = sample_spec("tbl_sample")
    for name, part in all_parts(spec, dialect):
        for m in re.finditer(r"tbl_sample(_meta|_head)?", part):
            assert part[m.start() - 1] == '"' and part[m.end()] == '"', (name, part)
        for f in SAMPLE_FIELDS:
            for m in re.finditer(re.escape(f.name), part):
                assert part[m.start() - 1] == '"' and part[m.end()] == '"', (name, f.name)
    joined = "\n".join(p for _, p in all_parts(spec, dialect))
    assert '"tbl_sample"' in joined and '"tbl_sample_meta"' in joined


def test_values_are_bound_never_interpolated() -> None:
    # No literal from a payload or argument can appear: the SQL depends only on the spec.
    spec = sample_spec()
    for dialect in DIALECTS.values():
        first = render(spec, dialect, "split")
        again = render(QueueSpec("sample_q", SAMPLE_FIELDS), dialect, "split")
        assert first == again


@pytest.mark.parametrize(
    "evil",
    [
        'x"; DROP TABLE users; --',
        "x; DROP TABLE users",
        "x' OR '1'='1",
        "public.users",
        'x""',
        "users--",
        "x/*",
        "{data}",
        "x)",
    ],
)
def test_a_table_or_field_name_can_never_inject(evil: str) -> None:
    with pytest.raises(InvalidSpec):
        QueueSpec(evil, SAMPLE_FIELDS)
    with pytest.raises(InvalidSpec):
        QueueSpec("safe", (Field(evil, K.TEXT),))


@pytest.mark.parametrize("dialect", list(DIALECTS.values()), ids=list(DIALECTS))
def test_quoting_doubles_embedded_quotes(dialect: Any) -> None:
    # The second line of defence, should a name ever reach the dialect unvalidated.
    assert dialect.quote("plain") == '"plain"'
    assert dialect.quote('a"b') == '"a""b"'


# -- SQLite: blocks and validity ----------------------------------------------------------------


def _returns_rows(part: str) -> bool:
    return "RETURNING" in part.upper() or part.lstrip().upper().startswith("SELECT")


def test_sqlite_blocks_return_rows_from_at_most_one_statement() -> None:
    for name, stmt in render(sample_spec(), SQLite(), "split").items():
        assert sum(_returns_rows(p) for p in stmt.parts) <= 1, name


@pytest.fixture
def sqlite_tables(tmp_path: Any) -> Iterator[sqlite3.Connection]:
    """The sample queue's tables, with the unique items' column and index (which every
    statement of the plain queue ignores)."""
    conn = sqlite3.connect(str(tmp_path / "sql.sqlite3"), isolation_level=None)
    for statement in create_statements(sample_spec(unique=True), SQLite()):
        conn.execute(statement)
    yield conn
    conn.close()


def _sqlite_values() -> dict[str, Any]:
    now = "2026-01-01 00:00:00.000000"
    values = Codec(sample_spec(), SQLite()).encode(SAMPLE_PAYLOAD)
    return {
        **{f"p{i}": v for i, v in enumerate(values)},
        "now": now, "run_at": now, "lease_until": now, "priority": 0, "n": 5, "count": 1,
        "strict": 1, "max_attempts": 3, "error": "e", "state": None, "channel": "dbqueue_q",
        "tokens": '[[1, 1, "2026-01-01 00:00:00.000000", "e"]]', "ids": "[1]", "due": 1,
        "before": now, "in_slots": 1, "slot_state": None, "table": "q", "id": 1,
        "unique_key": "k", "keys": '["k"]',
    }  # fmt: skip


@pytest.mark.sqlite
def test_every_sqlite_statement_compiles(sqlite_tables: sqlite3.Connection) -> None:
    values = _sqlite_values()
    parts = [*all_parts(sample_spec(), SQLite()), *all_parts(sample_spec(unique=True), SQLite())]
    for name, part in parts:
        params = {p: values[p] for p in SQLITE_PARAM.findall(part)}
        try:
            sqlite_tables.execute("EXPLAIN " + part, params).fetchall()
        except sqlite3.Error as exc:
            pytest.fail(f"{name}: {exc}\n{part}")


@pytest.mark.sqlite
def test_sqlite_blocks_really_return_rows_from_one_statement(
    sqlite_tables: sqlite3.Connection,
) -> None:
    # Run every block for real (rolled back) and ask SQLite which statements have columns.
    values = _sqlite_values()
    for name, stmt in render(sample_spec(), SQLite(), "split").items():
        sqlite_tables.execute("BEGIN")
        try:
            with_columns = 0
            for part in stmt.parts:
                cur = sqlite_tables.execute(
                    part, {p: values[p] for p in SQLITE_PARAM.findall(part)}
                )
                cur.fetchall()
                with_columns += cur.description is not None
            assert with_columns <= 1, name
            if name != "split_stats" and len(stmt.parts) > 1:
                assert with_columns == 1, name  # the block's result, and :ids, come from it
        finally:
            sqlite_tables.execute("ROLLBACK")


# -- PostgreSQL validity ------------------------------------------------------------------------


def _pg_values() -> dict[str, Any]:
    values = Codec(sample_spec(), PostgreSQL()).encode(SAMPLE_PAYLOAD)
    second = dt.timedelta(seconds=1)
    return {
        **{f"p{i}": v for i, v in enumerate(values)},
        **{f"c{i}": [v] for i, v in enumerate(values)},
        "priority": 0, "run_at": None, "delay": second, "n": 5, "lease": second, "count": 1,
        "ids": [1], "attempts": [1], "strict": True, "delays": [second], "errors": ["e"],
        "max_attempts": 3, "lock_key": 42, "error": "e", "state": None, "channel": "dbqueue_q",
        "commit": "off", "lock_timeout": "20ms", "compact_key": 43, "got": True, "due": True,
        "older_than": second, "in_slots": True, "slot_state": None, "table": "q", "id": 1,
        "unique_key": "k", "keys": ["k"], "id_seq": "pg_class", "writers": ["1/1"],
        "cap": dt.datetime.now(dt.UTC),
    }  # fmt: skip


@pytest.fixture(params=[False, True], ids=["plain", "unique"])
def pg_tables(
    request: pytest.FixtureRequest, pg_conn: psycopg.Connection, table_name: str
) -> Iterator[QueueSpec]:
    spec = sample_spec(table_name, unique=request.param)
    for statement in create_statements(spec, PostgreSQL()):
        pg_conn.execute(statement)
    yield spec
    for statement in drop_statements(spec, PostgreSQL()):
        pg_conn.execute(statement)


def explain_every_part(pg_conn: psycopg.Connection, parts: Iterator[tuple[str, str]]) -> None:
    """EXPLAIN each statement (those a single statement can be), or fail naming it."""
    values = _pg_values()
    for name, part in parts:
        if part.startswith(UNPLANNABLE):
            continue
        params = {p: values[p] for p in PG_PARAM.findall(part)}
        try:
            # Server-side binding: psycopg turns %(name)s into $n, the server plans the statement.
            pg_conn.cursor().execute("EXPLAIN " + part, params).fetchall()
        except psycopg.Error as exc:
            pytest.fail(f"{name}: {exc}\n{part}")


@pytest.mark.postgresql
def test_every_postgresql_statement_is_valid(
    pg_conn: psycopg.Connection, pg_tables: QueueSpec
) -> None:
    explain_every_part(pg_conn, all_parts(pg_tables, PostgreSQL()))


@pytest.mark.postgresql
def test_postgresql_push_many_is_valid_without_payload_fields(
    pg_conn: psycopg.Connection, table_name: str
) -> None:
    spec = QueueSpec(table_name, ())
    for statement in create_statements(spec, PostgreSQL()):
        pg_conn.execute(statement)
    try:
        for name, part in all_parts(spec, PostgreSQL()):
            if part.startswith(UNPLANNABLE):
                continue
            values = _pg_values()
            params = {p: values[p] for p in PG_PARAM.findall(part)}
            pg_conn.cursor().execute("EXPLAIN " + part, params).fetchall()
            assert name
    finally:
        for statement in drop_statements(spec, PostgreSQL()):
            pg_conn.execute(statement)


# -- consumer groups (split_groups.sql) ---------------------------------------------------------

GROUPED = QueueOptions(groups=("email", "search"))


def grouped_parts(table: str, dialect: Any) -> Iterator[tuple[str, str]]:
    """What a queue with consumer groups runs: the queue's pushes, and everything else of one
    group's (the queue refuses the rest, a group the pushes)."""
    spec = QueueSpec(table, SAMPLE_FIELDS, GROUPED)
    pushes = {"split_push", "split_push_many"}
    for name, part in all_parts(spec, dialect):
        if name in pushes:
            yield name, part
    for name, part in all_parts(spec.for_group("email"), dialect):
        if name not in pushes:
            yield name, part


@pytest.mark.sqlite
def test_every_sqlite_statement_of_a_queue_with_groups_compiles(tmp_path: Any) -> None:
    conn = sqlite3.connect(str(tmp_path / "groups.sqlite3"), isolation_level=None)
    for statement in create_statements(QueueSpec("q", SAMPLE_FIELDS, GROUPED), SQLite()):
        conn.execute(statement)
    values = _sqlite_values()
    for name, part in grouped_parts("q", SQLite()):
        params = {p: values[p] for p in SQLITE_PARAM.findall(part)}
        try:
            conn.execute("EXPLAIN " + part, params).fetchall()
        except sqlite3.Error as exc:
            pytest.fail(f"{name}: {exc}\n{part}")
    conn.close()


@pytest.mark.postgresql
def test_every_postgresql_statement_of_a_queue_with_groups_is_valid(
    pg_conn: psycopg.Connection, table_name: str
) -> None:
    spec = QueueSpec(table_name, SAMPLE_FIELDS, GROUPED)
    for statement in create_statements(spec, PostgreSQL()):
        pg_conn.execute(statement)
    try:
        explain_every_part(pg_conn, grouped_parts(table_name, PostgreSQL()))
    finally:
        for statement in drop_statements(spec, PostgreSQL()):
            pg_conn.execute(statement)


@pytest.mark.parametrize("dialect", list(DIALECTS.values()), ids=list(DIALECTS))
def test_a_queue_without_groups_renders_no_group_text(dialect: Any) -> None:
    # The group fragments are neutral: no statement of a plain queue names a group's table.
    for name, part in all_parts(sample_spec(), dialect):
        assert "_meta_" not in part and "AS h WHERE h.id = d.id" not in part, name
