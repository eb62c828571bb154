"""The ``dbqueue`` command line on a queue with consumer groups (``tests.sqlalchemy.fanout_jobs``,
handlers in ``tests.sqlalchemy.fanout_app``), run as a subprocess against real databases: a
burst worker handles each item once per group, and ``--group`` selects the handlers of some
groups."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from tests.sqlalchemy.cli_support import dbqueue
from tests.sqlalchemy.fanout_app import LOG_VARIABLE
from tests.sqlalchemy.fanout_jobs import GROUPS, FanoutBase, Order

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


@pytest.fixture
def handled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file the handlers of the worker subprocess append ``<group> <order_id>`` to."""
    log = tmp_path / "handled.log"
    monkeypatch.setenv(LOG_VARIABLE, str(log))
    return log


def lines(log: Path) -> list[str]:
    return sorted(log.read_text().splitlines()) if log.exists() else []


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
