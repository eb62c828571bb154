"""The handlers of the grouped ring ``Tick`` (one per consumer group), which a ``dbqueue
worker`` subprocess imports: each appends ``<group> <price>`` to the file named by the
environment variable ``RING_FANOUT_LOG``."""

from __future__ import annotations

import os

from dbqueue_sa.handlers import handler
from tests.sqlalchemy.ring_fanout_jobs import Tick

#: The environment variable naming the file the handlers append to.
LOG_VARIABLE = "RING_FANOUT_LOG"


def _record(group: str, tick: Tick) -> None:
    with open(os.environ[LOG_VARIABLE], "a", encoding="utf-8") as log:
        log.write(f"{group} {tick.price}\n")


@handler(Tick, group="trading")
def trade(tick: Tick) -> None:
    """The trading group's handler."""
    _record("trading", tick)


@handler(Tick, group="audit")
def audit(tick: Tick) -> None:
    """The audit group's handler."""
    _record("audit", tick)
