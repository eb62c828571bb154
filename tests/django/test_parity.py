"""The Django migration and the core DDL describe the same tables.

The core's tables for ``Job``'s spec are created under another name (``parity_job``) next to
the migrated ``testapp_job`` / ``testapp_job_meta`` / ``testapp_job_head``, and the two are
compared as the database reports them: columns, nullability, normalised types, defaults, the
partial indexes and the head table's key. The same for the unique queues of each scope (their
key column and partial unique index).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connections

from dbqueue.schema import create_statements, drop_statements
from dbqueue.spec import QueueOptions, QueueSpec
from dbqueue_django.executor import dialect_for
from dbqueue_django.models import QueueModel
from tests.conformance.spec import JOB_FIELDS, JOB_OPTIONS
from tests.django.aliases import ALIASES
from tests.django.testapp.models import Job, Ping, QueuedUniqueJob, StoredUniqueJob, UniqueJob

pytestmark = pytest.mark.django
DJANGO_DB = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])
DJANGO_TABLE, CORE_TABLE = "testapp_job", "parity_job"
#: The purposes of a split queue's meta indexes (see `indexes`), and a unique queue's.
META_INDEXES = frozenset({"pk", "ready", "leased"})
UNIQUE_META_INDEXES = META_INDEXES | {"unique"}
#: A head table's only index: its primary key.
HEAD_INDEXES = frozenset({"pk"})


@contextmanager
def core_copy(alias: str, source: QueueSpec, table: str) -> Iterator[QueueSpec]:
    """The core's tables for ``source``'s fields and options, named ``table``, on ``alias``."""
    spec = QueueSpec(table, source.fields, source.options)
    connection = connections[alias]
    with connection.cursor() as cursor:
        for statement in create_statements(spec, dialect_for(connection)):
            cursor.execute(statement)
    yield spec
    with connection.cursor() as cursor:
        # Every table create_statements made: the meta and head tables (each group's), the data.
        for statement in drop_statements(spec, dialect_for(connection)):
            cursor.execute(statement)


@pytest.fixture
def core_tables(alias: str) -> Iterator[QueueSpec]:
    """The core's tables for Job's spec, named ``parity_job``, on ``alias``."""
    with core_copy(alias, Job.queue.spec, CORE_TABLE) as spec:
        yield spec


def query(alias: str, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with connections[alias].cursor() as cursor:
        cursor.execute(sql, params or [])
        return cursor.fetchall()


def columns(alias: str, table: str) -> dict[str, tuple[Any, ...]]:
    """Column -> (nullable, normalised type, is the key, has a database default)."""
    if alias == "default":
        rows = query(
            alias,
            "SELECT column_name, is_nullable = 'YES', data_type, character_maximum_length, "
            "numeric_precision, numeric_scale, is_identity = 'YES', column_default "
            "FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = %s",
            [table],
        )
        return {
            name: (nullable, (dtype, length, precision, scale), identity, default is not None)
            for name, nullable, dtype, length, precision, scale, identity, default in rows
        }
    rows = query(alias, f'PRAGMA table_info("{table}")')
    return {
        name: (not notnull, sqlite_type(ctype), bool(pk), default is not None)
        for _cid, name, ctype, notnull, default, pk in rows
    }


def sqlite_type(declared: str) -> str:
    # Django spells PositiveSmallIntegerField "smallint unsigned" and adds a CHECK (>= 0);
    # both spellings have INTEGER affinity, so the stored values are the same.
    return declared.lower().removesuffix(" unsigned")


def numeric_defaults(alias: str, table: str) -> dict[str, str]:
    """Column -> its default, for the meta columns whose default is a plain number."""
    if alias == "default":
        rows = query(
            alias,
            "SELECT column_name, column_default FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = %s",
            [table],
        )
    else:
        rows = [(r[1], r[4]) for r in query(alias, f'PRAGMA table_info("{table}")')]
    return {name: d for name, d in rows if d is not None and re.fullmatch(r"'?\d+'?", d)}


def indexes(
    alias: str, table: str, purposes: frozenset[str] = META_INDEXES
) -> dict[str, tuple[Any, ...]]:
    """Index purpose ("ready", "leased", "pk", a unique queue's "unique") -> its normalised
    definition; the table must have exactly the indexes of ``purposes``."""
    hashed = re.compile(r"^dbq_[0-9a-f]{10}_")
    out: dict[str, tuple[Any, ...]] = {}
    if alias == "default":
        for name, definition in query(
            alias, "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", [table]
        ):
            purpose = "pk" if name == f"{table}_pkey" else hashed.sub("", name)
            definition = definition.replace(name, "<index>").replace(table, "<table>")
            out[purpose] = (definition,)
        assert set(out) == purposes, out
        return out
    for _seq, name, unique, origin, partial in query(alias, f'PRAGMA index_list("{table}")'):
        cols = [
            (r[2], bool(r[3]))
            for r in query(alias, f'PRAGMA index_xinfo("{name}")')
            if r[5]  # key columns only, not the rowid
        ]
        predicate = None
        if partial:
            (sql,) = query(alias, "SELECT sql FROM sqlite_master WHERE name = %s", [name])[0]
            predicate = " ".join(sql.split(" WHERE ", 1)[1].replace('"', "").split())
            # Django wraps a condition of several terms in parentheses, the core does not.
            if predicate.startswith("(") and predicate.endswith(")"):
                predicate = predicate[1:-1]
        purpose = "pk" if origin == "pk" else hashed.sub("", name)
        out[purpose] = (bool(unique), cols, predicate)
    assert set(out) == purposes, out
    return out


# -- the specs ------------------------------------------------------------------------------


def test_job_spec_is_the_conformance_spec() -> None:
    spec = Job.queue.spec
    assert spec.table == DJANGO_TABLE and spec.meta_table == "testapp_job_meta"
    assert spec.fields == JOB_FIELDS
    assert spec.options == JOB_OPTIONS
    assert spec.options.aware_datetimes is True  # USE_TZ = True in the test settings


def test_a_model_without_queue_options_gets_the_default_options() -> None:
    assert Ping.queue.spec.options == QueueOptions()
    assert Ping.queue.spec.field_names == ("message",)


# -- the tables -----------------------------------------------------------------------------


@DJANGO_DB
@pytest.mark.parametrize("alias", ALIASES)
def test_data_tables_agree(alias: str, core_tables: QueueSpec) -> None:
    django, core = columns(alias, DJANGO_TABLE), columns(alias, CORE_TABLE)
    assert (
        set(django) == set(core) == {"id", "enqueued_at", "last_error", *Job.queue.spec.field_names}
    )
    assert django == core


@DJANGO_DB
@pytest.mark.parametrize("alias", ALIASES)
def test_meta_tables_agree(alias: str, core_tables: QueueSpec) -> None:
    django = columns(alias, "testapp_job_meta")
    core = columns(alias, core_tables.meta_table)
    assert set(django) == {"id", "state", "priority", "run_at", "attempts", "lease_until"}
    assert django == core
    assert numeric_defaults(alias, "testapp_job_meta") == numeric_defaults(
        alias, core_tables.meta_table
    )
    assert set(numeric_defaults(alias, "testapp_job_meta")) == {"state", "priority", "attempts"}


@DJANGO_DB
@pytest.mark.parametrize("alias", ALIASES)
def test_meta_indexes_agree(alias: str, core_tables: QueueSpec) -> None:
    django = indexes(alias, "testapp_job_meta")
    core = indexes(alias, core_tables.meta_table)
    assert django == core
    if alias == "default":
        assert django["ready"] == (
            "CREATE INDEX <index> ON public.<table> USING btree (priority DESC, run_at, id) "
            "WHERE (state = 0)",
        )
        assert django["leased"] == (
            "CREATE INDEX <index> ON public.<table> USING btree (lease_until) WHERE (state = 1)",
        )
    else:
        assert django["ready"] == (
            False, [("priority", True), ("run_at", False), ("id", False)], "state = 0",
        )  # fmt: skip
        assert django["leased"] == (False, [("lease_until", False)], "state = 1")


@DJANGO_DB
@pytest.mark.parametrize("alias", ALIASES)
def test_no_other_indexes_on_the_data_tables(alias: str, core_tables: QueueSpec) -> None:
    """Only the primary key: the data table is read by id, and every extra index is a cost
    on every push."""
    if alias == "default":
        sql = "SELECT indexname FROM pg_indexes WHERE tablename = %s"
        assert query(alias, sql, [DJANGO_TABLE]) == [(f"{DJANGO_TABLE}_pkey",)]
        assert query(alias, sql, [CORE_TABLE]) == [(f"{CORE_TABLE}_pkey",)]
    else:
        # An INTEGER PRIMARY KEY is the rowid itself: no index at all.
        assert query(alias, f'PRAGMA index_list("{DJANGO_TABLE}")') == []
        assert query(alias, f'PRAGMA index_list("{CORE_TABLE}")') == []


def assert_heads_agree(alias: str, django_table: str, core_table: str) -> None:
    """A head table as Django's migration and the core's DDL made it: ``priority`` smallint,
    its primary key, and ``run_at`` an aware timestamp, both NOT NULL and without default."""
    django = columns(alias, django_table)
    assert django == columns(alias, core_table)
    if alias == "default":
        assert django == {
            "priority": (False, ("smallint", None, 16, 0), False, False),
            "run_at": (False, ("timestamp with time zone", None, None, None), False, False),
        }
        key = ("CREATE UNIQUE INDEX <index> ON public.<table> USING btree (priority)",)
    else:
        assert django == {
            "priority": (False, "smallint", True, False),
            "run_at": (False, "datetime", False, False),
        }
        key = (True, [("priority", False)], None)
    found = indexes(alias, django_table, HEAD_INDEXES)
    assert found == indexes(alias, core_table, HEAD_INDEXES)
    assert found["pk"] == key


@DJANGO_DB
@pytest.mark.parametrize("alias", ALIASES)
def test_head_tables_agree(alias: str, core_tables: QueueSpec) -> None:
    assert Job.queue.spec.head_table == Job.queue_head_model._meta.db_table == "testapp_job_head"
    assert_heads_agree(alias, "testapp_job_head", core_tables.head_table)


# -- unique queues -------------------------------------------------------------------------

UNIQUE_MODELS = pytest.mark.parametrize(
    "model", [UniqueJob, QueuedUniqueJob, StoredUniqueJob], ids=lambda m: m.__name__
)


@DJANGO_DB
@pytest.mark.parametrize("alias", ALIASES)
@UNIQUE_MODELS
def test_unique_tables_agree(alias: str, model: type[QueueModel]) -> None:
    table = model._meta.db_table
    with core_copy(alias, model.queue.spec, f"parity_{table}") as core:
        django_meta = columns(alias, f"{table}_meta")
        assert "unique_key" in django_meta
        assert django_meta == columns(alias, core.meta_table)
        assert columns(alias, table) == columns(alias, core.table)
        django = indexes(alias, f"{table}_meta", UNIQUE_META_INDEXES)
        assert django == indexes(alias, core.meta_table, UNIQUE_META_INDEXES)
        assert_heads_agree(alias, f"{table}_head", core.head_table)


@DJANGO_DB
@pytest.mark.parametrize("alias", ALIASES)
def test_the_unique_index_is_partial_over_the_scope(alias: str) -> None:
    django = indexes(alias, "testapp_uniquejob_meta", UNIQUE_META_INDEXES)
    if alias == "default":
        assert django["unique"] == (
            "CREATE UNIQUE INDEX <index> ON public.<table> USING btree (unique_key) "
            "WHERE ((unique_key IS NOT NULL) AND (state = ANY (ARRAY[0, 1, 6])))",
        )
    else:
        assert django["unique"] == (
            True, [("unique_key", False)], "unique_key IS NOT NULL AND state IN (0, 1, 6)",
        )  # fmt: skip
