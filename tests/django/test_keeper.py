"""The keeper through Django (dbqueue.upkeep.keeper): a process that pops through
``Model.queue`` gets a keeper connection of its own to the alias's database, which goes once
the pops stop; ``DBQUEUE_KEEPER = False`` turns it off."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from django.db import connections
from django.test.utils import override_settings

from dbqueue.drivers.psycopg import KEEPER_NAME
from dbqueue.upkeep import keeper
from dbqueue_django.apps import DBQueueConfig
from tests.django.testapp.models import Job

pytestmark = [
    pytest.mark.django,
    pytest.mark.postgresql,
    pytest.mark.django_db(transaction=True),
]


def wait_until(what: str, ok: Callable[[], bool], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def keeper_sessions() -> int:
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE application_name = %s AND datname = current_database()",
            [KEEPER_NAME],
        )
        (count,) = cursor.fetchone()
    return int(count)


@pytest.fixture
def kept() -> Iterator[None]:
    keeper.enable()
    yield
    keeper.disable()  # as the rest of the suite runs, its connection closed


def test_pops_through_the_model_get_a_keeper(kept: None) -> None:
    Job.queue.push_many([{"name": f"j{i}"} for i in range(5)])
    Job.queue.ack(Job.queue.pop_batch(5))
    wait_until("the keeper's connection", lambda: keeper_sessions() == 1)

    def advanced() -> bool:  # its rounds gave priority 0 a head: the pops get upkeep
        Job.queue.pop_batch(1)
        with connections["default"].cursor() as cursor:
            cursor.execute(f'SELECT count(*) FROM "{Job.queue.spec.head_table}"')
            (rows,) = cursor.fetchone()
        return bool(rows)

    wait_until("a head advanced", advanced)
    wait_until("it went", lambda: keeper_sessions() == 0, keeper.ACTIVE_FOR + 10)


def test_the_setting_turns_it_off(kept: None) -> None:
    with override_settings(DBQUEUE_KEEPER=False):
        DBQueueConfig._keeper()
    assert not keeper.KEEPER.enabled
    Job.queue.push(name="x")
    Job.queue.ack(Job.queue.pop_batch(1))
    time.sleep(keeper.GRACE + 0.5)
    assert keeper_sessions() == 0
