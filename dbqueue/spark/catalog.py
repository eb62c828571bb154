"""A queue as the database describes it: the Spark source knows a queue by its table name only.

Which layout a table has is :func:`dbqueue.discovery.layout_of`'s rule. The payload fields
are the data table's columns (split) or the failed table's (ring: its payload columns keep the
declared NOT NULL, where the slots' are all nullable because empty slots hold nothing), and
each PostgreSQL type maps back to the :class:`~dbqueue.spec.FieldKind` the core created it
from.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg

from dbqueue.dialects.postgresql import COLUMN_TYPES, PostgreSQL
from dbqueue.discovery import RING, FoundQueue, groups_of, layout_of
from dbqueue.errors import InvalidSpec, QueueTableMissing, UnsupportedOperation
from dbqueue.schema import FAILED_BASE_COLUMNS, SPLIT_BASE_COLUMNS
from dbqueue.spec import (
    GROUP_META_INFIX,
    GROUP_SIDE_INFIX,
    GROUP_STATE_INFIX,
    Field,
    FieldKind,
    QueueOptions,
    QueueSpec,
)
from dbqueue.sql import Statement, render

DIALECT = PostgreSQL()

#: PostgreSQL's spelling of each payload type (``format_type``), parameters stripped: the
#: types the core creates, and the spellings another tool may have used for the same kinds.
_KINDS = {
    **{spelling: kind for kind, spelling in COLUMN_TYPES.items()},
    "real": FieldKind.FLOAT,
    "character varying": FieldKind.TEXT,
    "json": FieldKind.JSON,
}
_TYPE = re.compile(r"^(?P<name>[a-z ]+?)(?:\((?P<args>[0-9, ]+)\))?$")


def statements(spec: QueueSpec) -> dict[str, Statement]:
    """The Spark statements (``sql/postgresql/spark.sql``) rendered for ``spec``."""
    q = DIALECT.quote

    def payload(alias: str) -> str:
        cast = {FieldKind.JSON, FieldKind.UUID}
        return "".join(
            f", {alias}.{q(f.name)}{'::text' if f.kind in cast else ''}" for f in spec.fields
        )

    extra = {
        "stage": q(spec.stage_table),
        "read_d": payload("d"),
        "read_t": payload("t"),
        "read_f": payload("f"),
    }
    return render(spec, DIALECT, "spark", extra)


def run(conn: psycopg.Connection[Any], stmt: Statement, params: dict[str, Any]) -> list[Any]:
    """Run one named statement; its rows (empty for a statement that returns none)."""
    (text,) = stmt.parts
    cur = conn.execute(text, params, prepare=False)
    return cur.fetchall() if cur.description is not None else []


def field_for(table: str, name: str, pg_type: str, not_null: bool) -> Field:
    """The payload field a column of ``pg_type`` was created from, or InvalidSpec."""
    match = _TYPE.match(pg_type)
    kind = _KINDS.get(match.group("name")) if match else None
    if match is None or kind is None:
        raise InvalidSpec(
            f"column {name!r} of queue {table!r} has type {pg_type}, which is not a dbqueue "
            f"payload type ({', '.join(sorted(_KINDS))})"
        )
    args = [int(a) for a in (match.group("args") or "").split(",") if a.strip()]
    extra: dict[str, Any] = {}
    if kind is FieldKind.TEXT and args:
        extra["max_length"] = args[0]
    if kind is FieldKind.DECIMAL and args:
        extra["max_digits"], extra["decimal_places"] = args[0], (args[1:] or [0])[0]
    return Field(name, kind, nullable=not not_null, **extra)


def load_queue(
    conn: psycopg.Connection[Any], table: str, options: QueueOptions | None = None
) -> FoundQueue:
    """The queue whose table is ``table``, described from the database.

    ``options`` are the behaviour the caller wants (lease, push timeout, payload limit); a
    ring's capacity always comes from its slot count. Raises InvalidSpec for a bad name and
    QueueTableMissing when no queue has that table.
    """
    options = options or QueueOptions()
    bare = QueueSpec(table, (), options.__class__(**_without_capacity(options)))
    stmts = statements(bare)
    names = [bare.table, bare.meta_table, bare.failed_table]
    found = [row[0] for row in run(conn, stmts["spark_tables"], {"names": names})]
    if bare.meta_table not in found:
        # Consumer groups' tables: a split queue's meta tables, a ring's state and side tables.
        for infix in (GROUP_META_INFIX, GROUP_STATE_INFIX, GROUP_SIDE_INFIX):
            prefix = {"prefix": f"{table}{infix}"}
            found += [row[0] for row in run(conn, stmts["spark_group_tables"], prefix)]
    columns = {name: run(conn, stmts["spark_columns"], {"table": name}) for name in found}
    names_of = {name: [c[0] for c in cols] for name, cols in columns.items()}
    layout = layout_of(table, names_of)
    groups = groups_of(table, names_of)
    if layout is not None and groups and bare.meta_table not in found:
        raise UnsupportedOperation(
            f"queue {table!r} delivers each item to consumer groups ({', '.join(groups)}); "
            f"Spark reads and writes queues without groups only: a Spark push would have to "
            f"write every group's rows, and a stream would consume for one group"
        )
    if layout is None:
        raise QueueTableMissing(
            f"no queue table {table!r} in the database (a split queue has {table!r} and "
            f"{bare.meta_table!r}, a ring {table!r} and {bare.failed_table!r}): create it with "
            f"the framework's migrations (Django migrate, Alembic, create_all) first"
        )
    ring = layout == RING
    source = bare.failed_table if ring else bare.table
    skip = FAILED_BASE_COLUMNS if ring else SPLIT_BASE_COLUMNS
    fields = tuple(field_for(table, n, t, nn) for n, t, nn in columns[source] if n not in skip)
    if not ring:
        return FoundQueue(QueueSpec(table, fields, bare.options))
    (capacity,) = run(conn, stmts["spark_capacity"], {})[0]
    if not capacity:
        raise InvalidSpec(f"ring queue {table!r} has no slots: migrate it first")
    ring_options = options.__class__(**{**_without_capacity(options), "capacity": int(capacity)})
    return FoundQueue(QueueSpec(table, fields, ring_options))


def _without_capacity(options: QueueOptions) -> dict[str, Any]:
    values = {name: getattr(options, name) for name in options.__dataclass_fields__}
    values["capacity"] = None
    return values
