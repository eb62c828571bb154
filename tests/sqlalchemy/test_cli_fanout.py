"""The ``dbqueue`` command line on a queue with consumer groups (``tests.sqlalchemy.fanout_jobs``,
handlers in ``tests.sqlalchemy.fanout_app``), run as a subprocess against real databases: a
burst worker handles each item once per group, ``--group`` selects the handlers of some
groups, and ``stats`` reports each group's counts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from tests.sqlalchemy.cli_support import dbqueue
from tests.sqlalchemy.fanout_jobs import GROUPS, FanoutBase, Order
from tests.sqlalchemy.handled_log import lines

pytestmark = pytest.mark.sqlalchemy

APP = "tests.sqlalchemy.fanout_app"
ORDERS = (11, 12, 13)


@pytest.fixture
def orders(url: str) -> Iterator[sa.Engine]:
    """The grouped queue's tables, holding ORDERS (dropped afterwards)."""
    engine = sa.create_engine(url)
    FanoutBase.metadata.drop_all(engine)
    FanoutBase.metadata.create_all(engine)
    with Session(engine) as session, session.begin():
        Order.queue.push_many(session, [{"order_id": n} for n in ORDERS])
    yield engine
    FanoutBase.metadata.drop_all(engine)
    engine.dispose()


def counts(engine: sa.Engine) -> dict[str, int]:
    with Session(engine) as session:
        return {g: Order.queue.group(g).count(session) for g in GROUPS}


def test_a_burst_worker_handles_each_item_once_per_group(
    orders: sa.Engine, url: str, handled: Path
) -> None:
    done = dbqueue("worker", "--url", url, APP, "--burst", "--concurrency", "2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("6 handled, 0 failed, ")
    assert "on sa_order[email], sa_order[search]" in done.stderr
    assert lines(handled) == sorted(f"{g} {n}" for g in GROUPS for n in ORDERS)
    assert counts(orders) == {"email": 0, "search": 0}
    with Session(orders) as session:  # the last group's ack removed each payload
        assert session.scalar(sa.select(sa.func.count()).select_from(Order)) == 0


def test_group_selects_the_handlers_of_a_group(orders: sa.Engine, url: str, handled: Path) -> None:
    done = dbqueue("worker", "--url", url, APP, "--burst", "--group", "search")
    assert done.returncode == 0, done.stderr
    assert lines(handled) == sorted(f"search {n}" for n in ORDERS)
    assert counts(orders) == {"email": len(ORDERS), "search": 0}


def test_a_group_no_selected_queue_has_is_refused(url: str) -> None:
    done = dbqueue("worker", "--url", url, APP, "--burst", "--group", "sms")
    assert done.returncode == 2
    assert "unknown consumer group 'sms': no selected queue has it" in done.stderr
    assert "(their groups: email, search)" in done.stderr


def test_stats_reports_each_groups_counts(orders: sa.Engine, url: str) -> None:
    with Session(orders) as session, session.begin():
        Order.queue.group("email").pop_batch(session, 1)
    done = dbqueue("stats", "--url", url, APP, "--json")
    assert done.returncode == 0, done.stderr
    rows = {r["queue"]: r for r in json.loads(done.stdout)["queues"]}
    assert set(rows) == {"sa_order[email]", "sa_order[search]"}
    email, search = rows["sa_order[email]"], rows["sa_order[search]"]
    assert (email["layout"], email["ready"], email["leased"]) == ("split", 2, 1)
    assert (search["ready"], search["leased"]) == (3, 0)
    table = dbqueue("stats", "--url", url, APP)
    assert table.returncode == 0, table.stderr
    assert "sa_order[email]" in table.stdout and "sa_order[search]" in table.stdout


def test_without_modules_each_group_is_found_in_the_database(orders: sa.Engine, url: str) -> None:
    with Session(orders) as session, session.begin():
        (item,) = Order.queue.group("search").pop_batch(session, 1)
        Order.queue.group("search").fail(session, [item], "boom", retry=False)
    done = dbqueue("stats", "--url", url, "--json")
    assert done.returncode == 0, done.stderr
    rows = {r["queue"]: r for r in json.loads(done.stdout)["queues"]}
    assert (rows["sa_order[email]"]["ready"], rows["sa_order[search]"]["failed"]) == (3, 1)
    # Retry and purge by the name stats gives, each on its group only.
    done = dbqueue("retry", "--url", url, "--queue", "sa_order[search]", "--all")
    assert done.returncode == 0, done.stderr
    done = dbqueue("purge", "--url", url, "--queue", "sa_order[email]", "--state", "all", "--yes")
    assert done.returncode == 0, done.stderr
    assert counts(orders) == {"email": 0, "search": 3}
    done = dbqueue("purge", "--url", url, "--queue", "sa_order", "--state", "all", "--yes")
    assert done.returncode != 0 and "sa_order[email]" in done.stderr
