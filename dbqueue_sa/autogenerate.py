"""Alembic autogenerate for queues: after Alembic's own comparison, the queue operations a
model change needs (:func:`compare_queues`), and the ring parts it must not propose to drop
(see :mod:`dbqueue_sa.migrations`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from alembic.autogenerate import comparators, renderers
from alembic.autogenerate.api import AutogenContext
from alembic.operations.ops import (
    AlterColumnOp,
    CreateIndexOp,
    CreateTableOp,
    DropIndexOp,
    DropTableOp,
    ModifyTableOps,
    UpgradeOps,
)
from alembic.util import DispatchPriority, PriorityDispatchResult
from sqlalchemy.dialects import postgresql

from dbqueue.errors import DBQueueError
from dbqueue.schema import (
    storage_parameters,
)
from dbqueue.spec import GROUP_STATE_INFIX, QueueSpec
from dbqueue.unique import UniqueScope, index_predicate
from dbqueue_sa.alembic_ops import (
    AlterQueueRingOp,
    CreateQueueRingGroupOp,
    CreateQueueRingOp,
    DropQueueRingGroupOp,
    DropQueueRingOp,
    QueueOp,
    TuneQueueGroupOp,
    TuneQueueTablesOp,
    has_counters,
    is_ring_part,
    is_seq_index,
    slot_count,
    table_spec,
)
from dbqueue_sa.mixins import QUEUE_CLASSES, RingQueueMixin, own_tables, queue_classes
from dbqueue_sa.tables import core_dialect, unique_index

# -- autogenerate -----------------------------------------------------------------------------


def _target_classes(autogen_context: AutogenContext) -> Iterator[type[Any]]:
    metadata = autogen_context.metadata
    if metadata is None:
        return
    for each in [metadata] if isinstance(metadata, sa.MetaData) else metadata:
        yield from queue_classes(each)


def _included(autogen_context: AutogenContext, table: sa.Table) -> bool:
    """Whether the env.py filters let autogenerate compare ``table``."""
    return autogen_context.run_name_filters(
        table.name, "table", {"schema_name": None}
    ) and autogen_context.run_object_filters(table, table.name, "table", False, None)


def _ring_change(autogen_context: AutogenContext, spec: QueueSpec) -> QueueOp | None:
    """The operation an existing ring table needs: its slots if it has none (or no counters),
    a capacity change if it has another number of them."""
    capacity = spec.options.capacity
    assert capacity is not None  # a ring spec always has one
    slots = slot_count(autogen_context.connection, spec.table)  # type: ignore[arg-type]
    if not slots or not has_counters(autogen_context.inspector, spec):
        return CreateQueueRingOp(spec.table, capacity)
    if slots != capacity:
        return AlterQueueRingOp(spec.table, capacity, slots)
    return None


def _tuning_change(autogen_context: AutogenContext, spec: QueueSpec) -> QueueOp | None:
    """``tune_queue_tables`` if an existing split queue's storage parameters are not set."""
    dialect = core_dialect(autogen_context.dialect.name)
    for table, wanted in storage_parameters(spec, dialect):
        options = _storage_parameters(autogen_context.connection, table)  # type: ignore[arg-type]
        if any(options.get(name) != value for name, value in wanted.items()):
            return TuneQueueTablesOp(spec.table, spec.options.groups or None)
    return None


def _storage_parameters(connection: sa.Connection, table: str) -> dict[str, str]:
    """A PostgreSQL table's storage parameters, read from the catalog: SQLAlchemy reflects
    them (``Inspector.get_table_options``) from 2.1 on only, and 2.0 raises
    NotImplementedError."""
    query = sa.text("SELECT reloptions FROM pg_class WHERE oid = to_regclass(:name)")
    options = connection.scalar(query, {"name": f'"{table}"'}) or []
    return dict(str(item).split("=", 1) for item in options)


def _queue_ops(autogen_context: AutogenContext, cls: type[Any], created: set[str]) -> list[QueueOp]:
    spec: QueueSpec = cls.__queue_spec__
    table: sa.Table = cls.__table__
    ring = issubclass(cls, RingQueueMixin)
    groups = spec.options.groups or None
    capacity = spec.options.capacity
    if spec.table in created or (not ring and not groups and spec.meta_table in created):
        if ring:
            assert capacity is not None  # a ring spec always has one
            return [
                CreateQueueRingOp(spec.table, capacity),
                *(CreateQueueRingGroupOp(spec.table, g, capacity) for g in spec.options.groups),
            ]
        return [TuneQueueTablesOp(spec.table, groups)]
    if not _included(autogen_context, table) or not autogen_context.inspector.has_table(spec.table):
        return []
    if ring:
        change = _ring_change(autogen_context, spec)
        # Consumer groups added to an existing ring: their rows and counters.
        return [
            *([] if change is None else [change]),
            *(
                CreateQueueRingGroupOp(spec.table, g.group, capacity)
                for g in spec.group_specs
                if g.state_table in created and g.group is not None
            ),
        ]
    # Consumer groups added to an existing queue: their tables only.
    added = [g for g in spec.options.groups if spec.for_group(g).meta_table in created]
    ops: list[QueueOp] = [TuneQueueGroupOp(spec.table, g) for g in added]
    if not added:
        change = _tuning_change(autogen_context, spec)
        ops += [] if change is None else [change]
    return ops


def _held_states(predicate: str) -> frozenset[int]:
    """The states a unique index's WHERE clause names, as the core writes it or as a database
    reflects it (``state IN (0, 1, 6)``, ``state = ANY (ARRAY[0, 1, 6])``; none for "stored"):
    its only numbers."""
    return frozenset(int(n) for n in re.findall(r"\b\d+\b", predicate))


#: Each scope by the states its index names.
_SCOPES = {_held_states(index_predicate(scope)): scope for scope in UniqueScope}


def _unique_scope_change(
    autogen_context: AutogenContext, cls: type[Any], created: set[str]
) -> ModifyTableOps | None:
    """Drop and create again the unique index of an existing unique queue whose WHERE clause
    is another scope's. Alembic compares an index's name, columns and uniqueness, not its
    WHERE clause, so a change of ``unique_scope`` would otherwise go unseen (the index keeps
    its name). Left alone: an index the database does not reflect a WHERE clause for, or one
    whose states are no scope's (not written by dbqueue)."""
    spec: QueueSpec = cls.__queue_spec__
    if not spec.options.is_unique or spec.meta_table in created:
        return None
    meta: sa.Table = cls.__queue_meta__
    if not _included(autogen_context, meta) or not autogen_context.inspector.has_table(
        spec.meta_table
    ):
        return None
    name = spec.index_name("unique")
    found = [i for i in autogen_context.inspector.get_indexes(spec.meta_table) if i["name"] == name]
    options: dict[str, Any] = dict(found[0].get("dialect_options") or {}) if found else {}
    where = next(
        (str(v) for k, v in options.items() if k.endswith("_where") and v is not None), None
    )
    old = _SCOPES.get(_held_states(where)) if where is not None else None
    new = spec.options.unique_scope_mode
    if old is None or old is new:
        return None
    # The old index on a stand-in of the meta table: what the downgrade creates again.
    standin = sa.Table(
        spec.meta_table,
        sa.MetaData(),
        sa.Column("unique_key", sa.Text()),
        sa.Column("state", sa.SmallInteger()),
    )
    index = next(i for i in meta.indexes if i.name == name)
    return ModifyTableOps(
        spec.meta_table,
        [
            DropIndexOp.from_index(unique_index(name, standin, old)),
            CreateIndexOp.from_index(index),
        ],
    )


def _removed_group(autogen_context: AutogenContext, name: str) -> DropQueueRingGroupOp | None:
    """``drop_queue_ring_group`` for a dropped table that is a ring's consumer group's state
    table (``<ring>_ring_<group>`` beside a ring whose counters exist), else None."""
    parts = name.split(GROUP_STATE_INFIX)
    for cut in range(1, len(parts)):
        ring, group = GROUP_STATE_INFIX.join(parts[:cut]), GROUP_STATE_INFIX.join(parts[cut:])
        try:
            spec = table_spec(ring)
            DropQueueRingGroupOp(ring, group)  # validates the group's name
        except DBQueueError:  # not names the core would give a ring and a group
            continue
        if has_counters(autogen_context.inspector, spec):
            slots = slot_count(autogen_context.connection, name)  # type: ignore[arg-type]
            return DropQueueRingGroupOp(ring, group, slots or None)
    return None


def _drop_removed_rings(autogen_context: AutogenContext, upgrade_ops: UpgradeOps) -> None:
    """Put ``drop_queue_ring`` before the ``drop_table`` of each ring table that is dropped
    (its counters are not the table's), so the downgrade recreates the slots too; and
    ``drop_queue_ring_group`` before that of a consumer group's state table."""
    for i, op in reversed(list(enumerate(upgrade_ops.ops))):
        if not isinstance(op, DropTableOp) or op.schema is not None:
            continue
        group = _removed_group(autogen_context, op.table_name)
        if group is not None:
            upgrade_ops.ops.insert(i, group)
            continue
        try:
            spec = table_spec(op.table_name)
        except DBQueueError:  # not a name the core would give a queue
            continue
        if has_counters(autogen_context.inspector, spec):
            slots = slot_count(autogen_context.connection, spec.table)  # type: ignore[arg-type]
            if slots:
                upgrade_ops.ops.insert(i, DropQueueRingOp(spec.table, capacity=slots))


def _type_modules(typ: sa.types.TypeEngine[Any]) -> Iterator[str]:
    """The dbqueue_sa modules of a column type and of its per-database variants."""
    variants: dict[str, sa.types.TypeEngine[Any]] = getattr(typ, "_variant_mapping", {})
    for each in (typ, *variants.values()):
        module = type(each).__module__
        if module.startswith("dbqueue_sa."):
            yield module


def _has_jsonb(typ: sa.types.TypeEngine[Any]) -> bool:
    variants: dict[str, sa.types.TypeEngine[Any]] = getattr(typ, "_variant_mapping", {})
    return any(isinstance(each, postgresql.JSONB) for each in (typ, *variants.values()))


def _import_type_modules(autogen_context: AutogenContext) -> None:
    """Import, in the script being rendered, the modules of the dbqueue column types the
    target metadata uses: Alembic writes a type outside SQLAlchemy under its module's name
    (``dbqueue_sa.tables.UTCDateTime()``) without importing it, and the script would fail
    with ``NameError: name 'dbqueue_sa' is not defined`` where env.py has no
    :func:`render_item` (which imports them too)."""
    metadata = autogen_context.metadata
    if metadata is None:
        return
    for each in [metadata] if isinstance(metadata, sa.MetaData) else metadata:
        for table in each.tables.values():
            for column in table.columns:
                for module in _type_modules(column.type):
                    autogen_context.imports.add(f"import {module}")
                if _has_jsonb(column.type):
                    # Rendered against another database: JSONB(astext_type=Text()).
                    autogen_context.imports.add("from sqlalchemy import Text")


def _leave_ring_parts(upgrade_ops: UpgradeOps) -> None:
    """Take out what :func:`include_object` hides, where env.py does not set it: the drops of
    a ring's counter tables and of its index on ``seq`` (SQLite), which the queue operations
    own. Autogenerate would otherwise propose them at every run after the first."""
    kept: list[Any] = []
    for op in upgrade_ops.ops:
        if isinstance(op, DropTableOp) and is_ring_part(op.to_table()):
            continue
        if isinstance(op, ModifyTableOps):
            op.ops = [
                o
                for o in op.ops
                if not (isinstance(o, DropIndexOp) and is_seq_index(op.table_name, o.index_name))
            ]
            if not op.ops:
                continue
        kept.append(op)
    upgrade_ops.ops[:] = kept


class CreateQueueTableOp(CreateTableOp):
    """The ``create_table`` of one of a queue's tables, rendered as Alembic renders any, with
    the modules of its dbqueue column types imported (see :func:`_import_type_modules`): a
    script may create a queue's table without any queue operation, such as the head table
    added to a queue made before head tables existed."""


def _mark_queue_tables(upgrade_ops: UpgradeOps, names: set[str]) -> None:
    """Make each ``create_table`` of a table named in ``names`` a :class:`CreateQueueTableOp`
    (the same operation, rendered with its imports)."""
    for i, op in enumerate(upgrade_ops.ops):
        if type(op) is CreateTableOp and op.schema is None and op.table_name in names:
            marked = CreateQueueTableOp.__new__(CreateQueueTableOp)
            marked.__dict__.update(op.__dict__)
            upgrade_ops.ops[i] = marked


@renderers.dispatch_for(CreateQueueTableOp)
def _render_create_table(autogen_context: AutogenContext, op: CreateQueueTableOp) -> Any:
    _import_type_modules(autogen_context)
    return renderers.dispatch(CreateTableOp)(autogen_context, op)


@comparators.dispatch_for("schema", priority=DispatchPriority.LAST)
def compare_queues(
    autogen_context: AutogenContext, upgrade_ops: UpgradeOps, schemas: set[str | None]
) -> PriorityDispatchResult:
    """Autogenerate's queue operations, once Alembic's own comparison has listed the tables
    (``priority=LAST``): after the ``create_table`` ops of a new queue, ``create_queue_ring``
    or ``tune_queue_tables``; for an existing queue, ``create_queue_ring`` if its ring has no
    slots or counters, ``alter_queue_ring`` if its slots are not its capacity,
    ``tune_queue_tables`` if its storage parameters are not set (PostgreSQL), the unique
    index dropped and created again if its ``unique_scope`` changed; before the
    ``drop_table`` of a removed ring, ``drop_queue_ring``. The ``create_table`` of a queue's
    table (a head table added to an existing queue, say) imports its column types' modules
    (:class:`CreateQueueTableOp`)."""
    _leave_ring_parts(upgrade_ops)
    if None in schemas:  # queue tables live in the default schema (dbqueue_sa.spec)
        created = {
            op.table_name
            for op in upgrade_ops.ops
            if isinstance(op, CreateTableOp) and op.schema is None
        }
        classes = list(_target_classes(autogen_context))
        _mark_queue_tables(upgrade_ops, {t.name for cls in classes for t in own_tables(cls)})
        for cls in classes:
            upgrade_ops.ops.extend(_queue_ops(autogen_context, cls, created))
            scope_op = _unique_scope_change(autogen_context, cls, created)
            if scope_op is not None:
                upgrade_ops.ops.append(scope_op)
        _drop_removed_rings(autogen_context, upgrade_ops)
    return PriorityDispatchResult.CONTINUE


@comparators.dispatch_for("column", subgroup="server_default", priority=DispatchPriority.FIRST)
def _unsupported_identity(
    autogen_context: AutogenContext,
    alter_column_op: AlterColumnOp,
    schema: str | None,
    tname: str,
    cname: str,
    conn_col: sa.Column[Any],
    metadata_col: sa.Column[Any],
) -> PriorityDispatchResult:
    """A split queue's ``id`` is an identity column on PostgreSQL and an AUTOINCREMENT key on
    SQLite, which has no identity columns: Alembic (``compare_server_default=True``) compares
    the declared ``Identity()`` with the nothing SQLite reflects and proposes to add it at
    every run. Skip that comparison for a queue table (by name: the target metadata may hold
    a copy) where the database has no identity columns."""
    if (
        not autogen_context.dialect.supports_identity_columns
        and isinstance(metadata_col.server_default, sa.Identity)
        and conn_col.server_default is None
        and any(name == tname for _, name in QUEUE_CLASSES)
    ):
        return PriorityDispatchResult.STOP
    return PriorityDispatchResult.CONTINUE


@renderers.dispatch_for(QueueOp)
def _render(autogen_context: AutogenContext, op: QueueOp) -> str:
    # A script with a queue operation may create a queue's tables: it imports the modules of
    # the tables' dbqueue column types (see _import_type_modules; CreateQueueTableOp does it
    # too, for a script that creates queue tables without any operation).
    _import_type_modules(autogen_context)
    return op.render()
