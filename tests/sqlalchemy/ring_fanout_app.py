"""The handlers of the grouped ring ``Tick`` (one per consumer group), which a ``dbqueue
worker`` subprocess imports: each appends ``<group> <price>`` to the file named by the
environment variable ``FANOUT_LOG`` (tests.sqlalchemy.handled_log)."""

from __future__ import annotations

from dbqueue_sa.handlers import handler
from tests.sqlalchemy.handled_log import record
from tests.sqlalchemy.ring_fanout_jobs import Tick


@handler(Tick, group="trading")
def trade(tick: Tick) -> None:
    """The trading group's handler."""
    record("trading", tick.price)


@handler(Tick, group="audit")
def audit(tick: Tick) -> None:
    """The audit group's handler."""
    record("audit", tick.price)
