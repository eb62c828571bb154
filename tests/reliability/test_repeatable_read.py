"""A REPEATABLE READ compactor beside producers and a consumer, as real processes: every item
whose push committed is delivered exactly once, and none that was acked is left in the
queue's tables.

The outside tester's repro of the compaction dbqueue had before VACUUM FULL (copy the live
rows out, TRUNCATE, copy them back): with the compactor's Django connection at REPEATABLE
READ, 289 committed pushes were lost, 78 items delivered twice and 37 acked rows came back.
Here two producer processes push ``PER_PRODUCER`` items each, one per ``transaction.atomic()``
that sleeps 0-10 ms before committing, a consumer process pops 20 at a time and acks them,
and a compactor process calls ``Job.queue.compact()`` every 20 ms at REPEATABLE READ: by
Django's ``OPTIONS["isolation_level"]``, or by its role's default
(``ALTER ROLE ... SET default_transaction_isolation``), which every process of that run uses.
Midway a REPEATABLE READ transaction holds the xmin horizon for ``HOLD`` seconds, then ends:
the tables grow while compaction must leave them, and it rewrites them after. Then the items
are compared one by one.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from tests.processes import wait_for
from tests.reliability.sites import Actors, own_database, own_role

pytestmark = [pytest.mark.postgresql, pytest.mark.django, pytest.mark.slow]

#: Items each of the two producers pushes (``DBQUEUE_RR_ITEMS`` to change it).
PER_PRODUCER = int(os.environ.get("DBQUEUE_RR_ITEMS", "1000"))
FIRSTS = (1, 1_000_001)  # the producers' first numbers
#: Seconds a REPEATABLE READ transaction holds the horizon midway.
HOLD = 5.0
HELD = "a transaction holds the xmin horizon"


@dataclass
class Site:
    """The processes' database (``admin_dsn``: as the server's user), how they start, what the
    compactor's environment adds (Django's option), and which of the two runs this is."""

    actors: Actors
    admin_dsn: str
    compactor_env: dict[str, str]
    how: str


@pytest.fixture(params=["django_option", "role_default"])
def site(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Site]:
    """The test app migrated into a database of its own, and its processes' compactor at
    REPEATABLE READ: by Django's option (that process alone), or by the default of a role of
    the test's own that owns the database and that every process connects as (the migration
    too: the tables must be the role's to vacuum)."""
    with ExitStack() as stack:
        if request.param == "django_option":
            dsn = stack.enter_context(own_database("dbqueue_rr"))
            actors = Actors(dsn, tmp_path)
            compactor_env = {"DBQUEUE_ACTOR_ISOLATION": "repeatable_read"}
        else:
            setting = ("default_transaction_isolation", "repeatable read")
            role = stack.enter_context(own_role("dbqueue_rr", setting))
            dsn = stack.enter_context(own_database("dbqueue_rr", owner=role))
            actors = Actors(psycopg.conninfo.make_conninfo(dsn, user=role), tmp_path)
            compactor_env = {}
        actors.migrate()
        try:
            yield Site(actors, dsn, compactor_env, request.param)
        finally:
            actors.close()


def numbers(lines: list[str], prefix: str = "") -> list[int]:
    """The numbers of the log lines that are ``<prefix><n>``."""
    return [
        int(line[len(prefix) :])
        for line in lines
        if line.startswith(prefix) and line[len(prefix) :].isdigit()
    ]


def test_a_repeatable_read_compactor_loses_and_repeats_nothing(site: Site) -> None:
    actors, admin_dsn = site.actors, site.admin_dsn
    actors.start("compactor", "compactor", "0.02", **site.compactor_env)
    actors.wait_for_line(
        "compactor", "the compactor's first line", lambda s: s.startswith("isolation")
    )
    actors.start("consumer", "consumer")
    producers = [f"producer-{i}" for i in range(len(FIRSTS))]
    for name, first in zip(producers, FIRSTS, strict=True):
        actors.start(name, "producer", str(first), str(PER_PRODUCER))

    def pushed_so_far() -> int:
        return sum(len(numbers(actors.lines(p), "+")) for p in producers)

    # Midway, a REPEATABLE READ transaction holds the horizon (on an unrelated table): the
    # tables grow, compaction must leave them; once it ends they are compacted.
    wait_for(lambda: pushed_so_far() >= len(FIRSTS) * PER_PRODUCER // 3, "a third is pushed")
    with psycopg.connect(admin_dsn, autocommit=True) as holder:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM django_migrations")
        held_at = time.time()
        time.sleep(HOLD)
        holder.execute("COMMIT")
    released = time.time()
    for name in producers:
        actors.wait(name, timeout=300)
    actors.stop("consumer")
    actors.wait("consumer", timeout=300)
    # At least one compaction that rewrote the tables after the horizon moved on.
    actors.wait_for_line(
        "compactor", "a compaction after the hold", lambda s: _rewrote(s) and _at(s) > released
    )
    actors.stop("compactor")
    actors.wait("compactor")

    isolation = actors.lines("compactor")[0].split()
    default, in_atomic = isolation[1], isolation[2]
    assert in_atomic == "repeatable_read"
    if site.how == "role_default":
        assert default == "repeatable_read"
    pushed = [n for p in producers for n in numbers(actors.lines(p), "+")]
    retried = [line for p in producers for line in actors.lines(p) if line.startswith("!")]
    delivered = Counter(numbers(actors.lines("consumer")))
    consumer_errors = [line for line in actors.lines("consumer") if line.startswith("!")]
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        left = {row[0] for row in conn.execute("SELECT n FROM testapp_job")}
        meta_left = conn.execute("SELECT count(*) FROM testapp_job_meta").fetchone()
    results = [
        line.split(" ", 2) for line in actors.lines("compactor")[1:] if not line.startswith("!")
    ]
    compacted = [float(r[0]) for r in results if r[1] == "1"]
    during = [r for r in results if held_at <= float(r[0]) <= released]
    held = [r for r in during if r[2].startswith(HELD)]
    compactor_errors = [line for line in actors.lines("compactor") if line.startswith("!")]

    lost = set(pushed) - set(delivered)
    twice = {n: c for n, c in delivered.items() if c > 1}
    unexpected = set(delivered) - set(pushed)
    back = left & set(delivered)
    print(
        f"{site.how}: compactor isolation {default}/{in_atomic}; "
        f"{len(pushed)} pushes committed ({len(retried)} attempts rolled back and retried), "
        f"{sum(delivered.values())} deliveries; {len(results)} compactions: {len(compacted)} "
        f"rewrote the tables ({sum(held_at <= t <= released for t in compacted)} during the "
        f"hold, {sum(t > released for t in compacted)} after it), {len(held)} skipped for "
        f"the held horizon; lost {len(lost)}, twice {len(twice)}, "
        f"unexpected {len(unexpected)}, acked rows back {len(back)}, rows left {len(left)}"
    )
    assert len(pushed) == len(set(pushed)) == len(FIRSTS) * PER_PRODUCER
    assert not lost, sorted(lost)[:20]
    assert not twice, sorted(twice.items())[:20]
    assert not unexpected, sorted(unexpected)[:20]
    assert not back, sorted(back)[:20]
    assert not left and meta_left == (0,)
    assert compacted, "no compaction rewrote the tables: the test proved nothing"
    assert not compactor_errors, compactor_errors[:5]
    assert not consumer_errors, consumer_errors[:5]


def _rewrote(line: str) -> bool:
    parts = line.split(" ", 2)
    return len(parts) >= 2 and parts[1] == "1"


def _at(line: str) -> float:
    return float(line.split(" ", 1)[0])
