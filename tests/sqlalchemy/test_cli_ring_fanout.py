"""The ``dbqueue`` command line on a ring with consumer groups
(``tests.sqlalchemy.ring_fanout_jobs``, handlers in ``tests.sqlalchemy.ring_fanout_app``), run as
a subprocess against real databases: a burst worker handles each tick once per group,
``--group`` selects a group's handler, and ``stats`` reports each group's counts, with and
without the application's modules."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from tests.sqlalchemy.cli_support import dbqueue
from tests.sqlalchemy.handled_log import lines
from tests.sqlalchemy.ring_fanout_jobs import GROUPS, RingFanoutBase, Tick

pytestmark = pytest.mark.sqlalchemy

APP = "tests.sqlalchemy.ring_fanout_app"
PRICES = (101, 102, 103)


@pytest.fixture
def ticks(url: str) -> Iterator[sa.Engine]:
    """The grouped ring's tables, holding PRICES (dropped afterwards)."""
    engine = sa.create_engine(url)
    RingFanoutBase.metadata.drop_all(engine)
    RingFanoutBase.metadata.create_all(engine)
    with Session(engine) as session, session.begin():
        Tick.queue.push_many(session, [{"price": p} for p in PRICES])
    yield engine
    RingFanoutBase.metadata.drop_all(engine)
    engine.dispose()


def counts(engine: sa.Engine) -> dict[str, int]:
    with Session(engine) as session:
        return {g: Tick.queue.group(g).count(session) for g in GROUPS}


def test_a_burst_worker_handles_each_tick_once_per_group(
    ticks: sa.Engine, url: str, handled: Path
) -> None:
    done = dbqueue("worker", "--url", url, APP, "--burst", "--concurrency", "2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("6 handled, 0 failed, ")
    assert "on sa_tick[trading], sa_tick[audit]" in done.stderr
    assert lines(handled) == sorted(f"{g} {p}" for g in GROUPS for p in PRICES)
    assert counts(ticks) == {"trading": 0, "audit": 0}


def test_group_selects_the_handler_of_a_group(ticks: sa.Engine, url: str, handled: Path) -> None:
    done = dbqueue("worker", "--url", url, APP, "--burst", "--group", "audit")
    assert done.returncode == 0, done.stderr
    assert lines(handled) == sorted(f"audit {p}" for p in PRICES)
    assert counts(ticks) == {"trading": len(PRICES), "audit": 0}


def test_stats_reports_each_groups_counts_with_and_without_modules(
    ticks: sa.Engine, url: str
) -> None:
    with Session(ticks) as session, session.begin():
        Tick.queue.group("trading").pop_batch(session, 1)
    for modules in ([APP], []):
        done = dbqueue("stats", "--url", url, *modules, "--json")
        assert done.returncode == 0, done.stderr
        rows = {r["queue"]: r for r in json.loads(done.stdout)["queues"]}
        # Without modules, every queue of the database (other tests' too) is listed.
        ours = {name for name in rows if name.startswith("sa_tick")}
        assert ours == {"sa_tick[audit]", "sa_tick[trading]"}, modules
        trading, audit = rows["sa_tick[trading]"], rows["sa_tick[audit]"]
        assert (trading["layout"], trading["ready"], trading["leased"]) == ("ring", 2, 1)
        assert (audit["ready"], audit["leased"]) == (3, 0)


def test_retry_and_purge_reach_one_group_by_name(ticks: sa.Engine, url: str) -> None:
    with Session(ticks) as session, session.begin():
        audit = Tick.queue.group("audit")
        (tick,) = audit.pop_batch(session, 1)
        audit.fail(session, [tick], "ledger down", retry=False)
    done = dbqueue("retry", "--url", url, "--queue", "sa_tick[audit]", "--all")
    assert done.returncode == 0, done.stderr
    with Session(ticks) as session:
        assert Tick.queue.group("audit").stats(session)["failed"] == 0
    done = dbqueue("purge", "--url", url, "--queue", "sa_tick[trading]", "--state", "all", "--yes")
    assert done.returncode == 0, done.stderr
    assert counts(ticks) == {"trading": 0, "audit": len(PRICES)}
