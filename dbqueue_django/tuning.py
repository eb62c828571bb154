"""Storage parameters for queue tables, applied after every ``migrate``.

Django migrations cannot express per-table storage parameters (fillfactor, autovacuum
thresholds); setting them after migrate is idempotent and cheap, and keeps them right even for
tables created before a parameter was introduced. (A ring's migration sets its own when it
preallocates the slots; they are applied again here for the same reason.)
"""

from __future__ import annotations

from django.apps import AppConfig
from django.db import connections, router

from dbqueue.dialects.base import Dialect
from dbqueue.errors import InvalidSpec, UnsupportedDatabase
from dbqueue.schema import (
    group_state_storage_parameters,
    ring_storage_tables,
    ring_tuning_statements,
    set_statements,
    storage_parameters,
    tuning_statements,
)
from dbqueue.spec import QueueSpec
from dbqueue_django.executor import dialect_for
from dbqueue_django.models import queue_models
from dbqueue_django.spec import is_ring, spec_for_model


def _statements(spec: QueueSpec, dialect: Dialect, ring: bool, existing: set[str]) -> list[str]:
    if ring:
        # A ring's slots may be stored in segments (a ring of many slots). A table migrated
        # to another capacity than the model's (in or out of segments) is left alone: a
        # partitioned table takes no storage parameters, and the worker reports the mismatch.
        stored = {table for table, _ in ring_storage_tables(spec)}
        segmented = stored != {spec.table}
        matches = stored <= existing and (spec.segment_table(0) in existing) == segmented
        if not matches:
            return []
        # Each consumer group's state table as it exists (see the split queue's below).
        groups = [g for g in spec.group_specs if g.state_table in existing]
        storage = [p for g in groups for p in group_state_storage_parameters(g, dialect)]
        return ring_tuning_statements(spec, dialect) + set_statements(storage, dialect)
    if spec.fans_out:
        # Each consumer group's table as it exists: a group added or removed by a migration
        # not yet applied is left for the next migrate.
        tables = {spec.table, *spec.group_meta_tables} & existing
        present = [p for p in storage_parameters(spec, dialect) if p[0] in tables]
        return set_statements(present, dialect) if spec.table in tables else []
    if spec.table in existing and spec.meta_table in existing:
        return tuning_statements(spec, dialect)
    return []


def tune_tables(app_config: AppConfig, using: str) -> None:
    """Apply the core's tuning statements to the app's queue tables on ``using``."""
    connection = connections[using]
    try:
        dialect = dialect_for(connection)
    except UnsupportedDatabase:
        return
    if not dialect.supports_storage_parameters:
        return
    models = [m for m in queue_models([app_config]) if router.allow_migrate_model(using, m)]
    if not models:
        return
    with connection.cursor() as cursor:
        # Partitions too, which table_names() leaves out: a ring's segments are partitions.
        existing = {t.name for t in connection.introspection.get_table_list(cursor)}
        for model in models:
            try:
                spec = spec_for_model(model)
            except InvalidSpec:
                continue  # reported by the system check
            for statement in _statements(spec, dialect, is_ring(model), existing):
                cursor.execute(statement)
