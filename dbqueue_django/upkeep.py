"""Ring tables kept whole around ``migrate`` and ``flush`` (post_migrate handlers).

* ``flush`` empties every table a model owns, a ring's slots included (so do the test
  runners between transactional tests); Django then sends ``post_migrate``, and an empty ring
  table gets its slots again, numbered on from its counters, which flush leaves alone.
* The counters (PostgreSQL sequences, SQLite one-row tables) do not belong to the ring table, so
  a migration that drops the table (migrating backwards past its creation, or deleting the
  model) leaves them behind: they are dropped once both of the ring's tables are gone.
"""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.apps.registry import Apps
from django.db import connections, router

from dbqueue.errors import UnsupportedDatabase
from dbqueue.schema import drop_ring_counter_statements
from dbqueue.spec import QueueOptions, QueueSpec
from dbqueue_django.executor import dialect_for
from dbqueue_django.models import RingQueueModel, ring_models
from dbqueue_django.slots import RingSlots

#: Database alias -> {ring table: capacity} in the migration state before the current migrate.
_BEFORE: dict[str, dict[str, int]] = {}


def ring_slots(model: type[Any]) -> RingSlots | None:
    """The RingSlots index of a (current or historical) model, if it is a ring."""
    return next((i for i in model._meta.indexes if isinstance(i, RingSlots)), None)


def note_rings(using: str, apps: Apps, **kwargs: Any) -> None:
    """pre_migrate: remember the rings the migration state has before migrating."""
    rings = ((m._meta.db_table, ring_slots(m)) for m in apps.get_models())
    _BEFORE[using] = {table: index.capacity for table, index in rings if index is not None}


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
    before = _BEFORE.pop(using, {})
    with connection.cursor() as cursor:
        for table, capacity in before.items():
            if table in existing or f"{table}_failed" in existing:
                continue
            spec = QueueSpec(table, (), QueueOptions(capacity=capacity))
            for statement in drop_ring_counter_statements(spec, dialect):
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
