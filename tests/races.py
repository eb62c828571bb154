"""Pushers of one unique key racing on PostgreSQL (dbqueue.unique), for every front's tests.

Each pusher runs in a thread, in a transaction of its own that the test's ``push`` opens; the
first to write keeps its transaction open until all the others are seen waiting on a lock
(pg_stat_activity, read on a connection of its own: a session's view of it is frozen for its
transaction), so the race really happens; then it commits and the others return its item.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg

from dbqueue import Pushed

#: A test's push: open a transaction, push the key, hand the result to ``hold`` inside it.
Push = Callable[[Callable[[Pushed], None]], None]


def race_one_key(pushers: int, conninfo: dict[str, Any], table: str, push: Push) -> list[Pushed]:
    """Run ``pushers`` threads of ``push``; check that no error was raised, that the race
    happened (the others waited for the first writer, whose meta ``table`` their statement
    names) and that every push returned the one item written. Returns what they returned."""
    results: list[Pushed] = []
    errors: list[BaseException] = []
    seen_waiting: list[int] = []
    with psycopg.connect(**conninfo, autocommit=True) as watch:

        def waiting() -> int:
            row = watch.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND strpos(query, %s) > 0",
                [table],
            ).fetchone()
            return int(row[0]) if row else 0

        def hold(pushed: Pushed) -> None:
            results.append(pushed)
            if pushed.duplicate:
                return
            for _ in range(3000):  # at most 30 s: the others are starting
                if waiting() == pushers - 1:
                    break
                threading.Event().wait(0.01)
            seen_waiting.append(waiting())

        def run() -> None:
            try:
                push(hold)
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=run) for _ in range(pushers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
    assert not errors
    assert seen_waiting == [pushers - 1]  # the race happened: all waited for the holder
    assert len(results) == pushers and len(set(results)) == 1
    assert sum(not r.duplicate for r in results) == 1
    return results
