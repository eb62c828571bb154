"""Ring tables kept whole around ``migrate`` and ``flush`` (post_migrate handlers).

* ``flush`` empties every table a model owns, a ring's slots included (so do the test
  runners between transactional tests); Django then sends ``post_migrate``, and an empty ring
  table gets its slots again, numbered on from its counters, which flush leaves alone.
* The counters (PostgreSQL sequences, SQLite one-row tables) do not belong to the ring table, so
  a migration that drops the table (migrating backwards past its creation, or deleting the
  model) leaves them behind: they are dropped once both of the ring's tables are gone.
* The same for a ring's consumer groups: an emptied state table gets its rows and its pop
  counter again (from the refilled slots), and a group's pop counter is dropped once its
  state table is gone (a group removed, on Django 5.2, which deletes the model without
  removing its index first).
"""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.apps.registry import Apps
from django.db import connections, router

from dbqueue.errors import UnsupportedDatabase
from dbqueue.schema import drop_group_counter_statements, drop_ring_counter_statements
from dbqueue.spec import QueueOptions, QueueSpec
from dbqueue_django.executor import dialect_for
from dbqueue_django.models import RingQueueModel, ring_models
from dbqueue_django.slots import RingGroupRows, RingSlots

#: Database alias -> {ring table: capacity} in the migration state before the current migrate.
_BEFORE: dict[str, dict[str, int]] = {}
#: Database alias -> the ring groups' RingGroupRows in the migration state before it.
_GROUPS_BEFORE: dict[str, list[RingGroupRows]] = {}


def ring_slots(model: type[Any]) -> RingSlots | None:
    """The RingSlots index of a (current or historical) model, if it is a ring."""
    return next((i for i in model._meta.indexes if isinstance(i, RingSlots)), None)


def group_rows(model: type[Any]) -> RingGroupRows | None:
    """The RingGroupRows index of a (current or historical) model, if it is a ring group's
    state model."""
    return next((i for i in model._meta.indexes if isinstance(i, RingGroupRows)), None)


def note_rings(using: str, apps: Apps, **kwargs: Any) -> None:
    """pre_migrate: remember the rings the migration state has before migrating."""
    rings = ((m._meta.db_table, ring_slots(m)) for m in apps.get_models())
    _BEFORE[using] = {table: index.capacity for table, index in rings if index is not None}
    groups = (group_rows(m) for m in apps.get_models())
    _GROUPS_BEFORE[using] = [index for index in groups if index is not None]


def restore_rings(app_config: AppConfig, using: str, **kwargs: Any) -> None:
    """post_migrate (also sent by flush): refill emptied ring tables, drop orphaned counters."""
    connection = connections[using]
    try:
        dialect = dialect_for(connection)
    except UnsupportedDatabase:
        return
    existing = set(connection.introspection.table_names())
    for model in ring_models([app_config]):
        if model._meta.db_table in existing and router.allow_migrate_model(using, model):
            _refill_if_empty(model, using)
            for state in model.queue_group_models.values():
                if state._meta.db_table in existing:
                    _refill_group_if_empty(state, using)
    before = _BEFORE.pop(using, {})
    with connection.cursor() as cursor:
        for table, capacity in before.items():
            if table in existing or f"{table}_failed" in existing:
                continue
            spec = QueueSpec(table, (), QueueOptions(capacity=capacity))
            for statement in drop_ring_counter_statements(spec, dialect):
                cursor.execute(statement)
        for index in _GROUPS_BEFORE.pop(using, []):
            if index.spec.state_table not in existing:
                for statement in drop_group_counter_statements(index.spec, dialect):
                    cursor.execute(statement)


def _refill_if_empty(model: type[RingQueueModel], using: str) -> None:
    index = ring_slots(model)
    if index is None or model._base_manager.using(using).exists():
        return  # an invalid declaration (see the system checks), or slots in place
    # What a migration does to replace the slots: remove (the SQLite index on seq
    # included), then preallocate from the next number.
    with connections[using].schema_editor() as editor:
        editor.remove_index(model, index)
        editor.add_index(model, index)


def _refill_group_if_empty(state: type[Any], using: str) -> None:
    index = group_rows(state)
    if index is None or state._base_manager.using(using).exists():
        return  # an invalid declaration, or rows in place
    # What a capacity change does to the group: remove (its counter too), then fill again
    # from the slots and the push counter.
    with connections[using].schema_editor() as editor:
        editor.remove_index(state, index)
        editor.add_index(state, index)
