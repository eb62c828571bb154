"""The test suite's ``flush``: what each transactional test's teardown runs, made cheaper.

Django's flush (measured on PostgreSQL, 48 tables, one ring of 3 with consumer groups):
``TRUNCATE`` of every table, 170 ms (a new file for each table, index and sequence); then
``post_migrate`` to every app, whose handlers write the content types and permissions back
and refill every ring it emptied, 170 ms more. 1,200 teardowns a run made it a fifth of the
whole suite's time. This one does what those tests need, more cheaply:

- ``DELETE`` on PostgreSQL instead of ``TRUNCATE`` (a few rows each; Django's foreign keys
  are deferred to the commit, so the order does not matter), unless sequences are to be
  reset, which only ``TRUNCATE ... RESTART IDENTITY`` does;
- the content types and permissions are left alone (rows derived from the models, the same
  before and after), so their handlers have nothing to write back;
- a ring no test left a message in (every slot empty, nothing in its side table, no consumer
  groups) is left as it is, as a drained ring stands in production, and not refilled;
- dbqueue_django's own ``post_migrate`` handler, which refills the rings flushed, runs for
  every app as Django's flush has it run.

Tests of flush itself call Django's command by its class
(``django.core.management.commands.flush.Command``).
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.core.management.color import no_style
from django.core.management.commands import flush
from django.db import connections, router

from dbqueue.ring.states import SlotState
from dbqueue_django.models import ring_models
from dbqueue_django.upkeep import restore_rings, ring_slots

#: Tables flush leaves as they are: derived from the models, written once by ``migrate``.
KEPT = frozenset({"django_content_type", "auth_permission"})


class Command(flush.Command):
    help = "Django's flush, made cheaper for the test suite's teardowns (see the module)."

    def handle(self, **options: Any) -> None:
        database = options["database"]
        connection = connections[database]
        existing = connection.introspection.django_table_names(
            only_existing=True, include_views=False
        )
        kept = KEPT | drained_rings(database, set(existing))
        tables = [table for table in existing if table not in kept]
        reset = options.get("reset_sequences", True)  # Django's defaults, as call_command
        cascade = options.get("allow_cascade", False)  # passes only the parser's options
        if connection.vendor == "postgresql" and not reset and not cascade:
            statements = [f"DELETE FROM {connection.ops.quote_name(t)}" for t in tables]
        else:
            statements = connection.ops.sql_flush(
                no_style(), tables, reset_sequences=reset, allow_cascade=cascade
            )
        connection.ops.execute_sql_flush(statements)
        if not options.get("inhibit_post_migrate", False):
            for config in apps.get_app_configs():
                restore_rings(config, database)


def drained_rings(database: str, existing: set[str]) -> set[str]:
    """The tables of the rings of ``database`` that hold no message: every slot in place,
    numbered and empty, nothing in the side table, and no consumer groups (whose state rows
    this does not read)."""
    drained: set[str] = set()
    for model in ring_models():
        side = model.failed_model
        tables = {model._meta.db_table, side._meta.db_table}
        if (
            model.queue_group_models
            or not tables <= existing
            or not router.allow_migrate_model(database, model)
        ):
            continue
        slots = model._base_manager.using(database)
        index = ring_slots(model)
        if (
            index is None
            or slots.filter(seq__isnull=False).count() != index.capacity
            or slots.exclude(state=SlotState.EMPTY).exists()
            or side._base_manager.using(database).exists()
        ):
            continue
        drained |= tables
    return drained
