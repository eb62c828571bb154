"""The test suite's ``flush``: what each transactional test's teardown runs, made cheaper.

Django's flush (measured on PostgreSQL: 48 tables, three rings, one with consumer groups):
``TRUNCATE`` of every table, 170 ms (a new file for each table, index and sequence); then
``post_migrate`` to every app, whose handlers write the content types and permissions back
and refill every ring it emptied, 170 ms more. 1,200 teardowns a run made it a fifth of the
whole suite's time. This one does what those tests need, more cheaply (leaving a drained ring
unflushed would save more, but its counters may stand apart, a pop's number ahead of the
pushes: only a refill numbers both on from the same point):

- ``DELETE`` on PostgreSQL instead of ``TRUNCATE`` (a few rows each; Django's foreign keys
  are deferred to the commit, so the order does not matter), unless sequences are to be
  reset, which only ``TRUNCATE ... RESTART IDENTITY`` does;
- the content types and permissions are left alone (rows derived from the models, the same
  before and after), so their handlers have nothing to write back;
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
from django.db import connections

from dbqueue_django.upkeep import restore_rings

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
        tables = [table for table in existing if table not in KEPT]
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
