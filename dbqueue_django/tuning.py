"""Storage parameters for queue tables, applied after every ``migrate``.

Django migrations cannot express per-table storage parameters (fillfactor, autovacuum
thresholds); setting them after migrate is idempotent and cheap, and keeps them right even for
tables created before a parameter was introduced.
"""

from __future__ import annotations

from django.apps import AppConfig
from django.db import connections, router

from dbqueue.errors import InvalidSpec, UnsupportedDatabase
from dbqueue.schema import tuning_statements
from dbqueue_django.executor import dialect_for
from dbqueue_django.models import queue_models
from dbqueue_django.spec import spec_for_model


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
    existing = set(connection.introspection.table_names())
    with connection.cursor() as cursor:
        for model in models:
            try:
                spec = spec_for_model(model)
            except InvalidSpec:
                continue  # reported by the system check
            if spec.table in existing and spec.meta_table in existing:
                for statement in tuning_statements(spec, dialect):
                    cursor.execute(statement)
