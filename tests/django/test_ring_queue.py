"""``Model.queue`` of a ring queue model (``Tick``, 8 slots) on PostgreSQL and SQLite: what is
Django's own (model instances of the slot table, ``items()``, the failed model and
``waiting()``, a full ring, missing tables, the capacity check). What every front end does
alike with a ring (delivery modes, fencing, failures, bad input) is the conformance suite's
(tests/conformance, on ``RingJob``)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from django.db import connections, models, transaction
from django.test.utils import isolate_apps

from dbqueue.errors import (
    InvalidArgument,
    NotLeased,
    QueueFull,
    QueueTableMissing,
    RingCapacityMismatch,
)
from dbqueue.message import State
from dbqueue.ring import RingQueue, SlotState
from dbqueue_django.models import RingQueueModel
from dbqueue_django.ring_queue import RingDjangoQueue
from tests.core.upkeep.support import while_held
from tests.django.testapp.models import Tick

pytestmark = [
    pytest.mark.django,
    pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
]
ZERO = dt.timedelta(0)
CAPACITY = 8


@pytest.fixture
def queue(alias: str) -> RingDjangoQueue[Tick]:
    return Tick.queue.using(alias)


def tick(i: int, **extra: Any) -> dict[str, Any]:
    return {"symbol": f"S{i}", "price": Decimal(i) / 4, **extra}


def push(queue: RingDjangoQueue[Tick], count: int) -> list[int]:
    return queue.push_many([tick(i) for i in range(count)])


def fail_for_good(queue: RingDjangoQueue[Tick], symbol: str) -> int:
    """Push a tick and fail it ``max_attempts`` (2) times: it moves to the failed table."""
    number = queue.push(symbol=symbol, price=Decimal(1))
    (first,) = queue.pop_batch(1)
    assert queue.fail(first, "first attempt", delay=ZERO) == {number: State.READY}
    queue.rescue()  # the sweeper pushes the retry again, under a new number
    (second,) = queue.pop_batch(1)
    assert second.symbol == symbol and second.attempts == 2
    assert queue.fail(second, "ValueError: second attempt") == {second.id: State.FAILED}
    return second.id


# -- model instances ------------------------------------------------------------------------


def test_the_readme_example(queue: RingDjangoQueue[Tick]) -> None:
    number = queue.push(symbol="ACME", price=Decimal("1.25"))
    queue.push_many([tick(1), tick(2)])
    ticks = queue.pop_batch(500)
    assert [t.symbol for t in ticks] == ["ACME", "S1", "S2"]
    assert queue.ack(ticks) == [number, number + 1, number + 2]
    assert queue.stats()["ready"] == 0


def test_pop_batch_returns_slot_instances(alias: str, queue: RingDjangoQueue[Tick]) -> None:
    numbers = queue.push_many([tick(1, note="first"), tick(2)])
    ticks = queue.pop_batch(5)
    assert [type(t) for t in ticks] == [Tick, Tick]
    first = ticks[0]
    assert first.id == first.seq == numbers[0]
    assert first.pk == first.slot == numbers[0] % CAPACITY
    assert (first.symbol, first.price, first.volume, first.note) == (
        "S1",
        Decimal("0.25"),
        0,
        "first",
    )
    assert ticks[1].note is None
    assert first.attempts == 1 and first.state == SlotState.LEASED and first.lease_until is not None
    assert first.pushed_at is not None and first.last_error is None
    assert first._state.db == alias and first._state.adding is False
    # The instance is the slot row as the ORM reads it.
    stored = Tick.objects.using(alias).get(pk=first.pk)
    assert (stored.id, stored.state, stored.symbol) == (first.id, SlotState.LEASED, "S1")


@pytest.mark.parametrize("mode", ["at_most_once", "transactional"])
def test_the_removing_modes_empty_the_slot(
    alias: str, queue: RingDjangoQueue[Tick], mode: str
) -> None:
    numbers = push(queue, 3)
    if mode == "transactional":
        with transaction.atomic(using=alias):
            ticks = queue.pop_batch(2, mode=mode)
    else:
        ticks = queue.pop_batch(2, mode=mode)
    assert [t.id for t in ticks] == numbers[:2]
    assert all(t.state == SlotState.EMPTY and t.lease_until is None for t in ticks)
    assert [t.id for t in queue.items()] == numbers[2:]
    with pytest.raises(NotLeased):
        queue.ack(ticks)  # nothing to acknowledge: they are gone


def test_a_failure_waits_out_of_the_ring_then_the_sweeper_pushes_it_again(
    queue: RingDjangoQueue[Tick],
) -> None:
    (number,) = push(queue, 1)
    (item,) = queue.pop_batch(1)
    queue.fail(item, ValueError("no price feed"), delay=dt.timedelta(hours=1))
    (waiting,) = queue.waiting()  # out of the ring: its slot is free meanwhile
    assert type(waiting) is Tick.failed_model
    assert (waiting.id, waiting.state, waiting.last_error) == (
        number, State.READY, "ValueError: no price feed",
    )  # fmt: skip
    assert waiting.run_at is not None and queue.items().count() == 0
    assert queue.pop_batch(1) == []
    assert queue.rescue().returned == 0  # its back-off has not ended
    assert queue.stats()["scheduled"] == 1 and not queue.failed().exists()


def test_failed_messages_move_to_the_failed_model(alias: str, queue: RingDjangoQueue[Tick]) -> None:
    number = fail_for_good(queue, "BAD")
    (failed,) = queue.failed()
    assert type(failed) is Tick.failed_model
    assert (failed.id, failed.symbol, failed.attempts) == (number, "BAD", 2)
    assert failed.last_error == "ValueError: second attempt" and failed.failed_at is not None
    assert queue.stats()["failed"] == 1 and queue.items().count() == 0
    # Retry: pushed again at the tail under a new number, attempts reset.
    assert queue.retry(queue.failed()) == 1
    (retried,) = queue.pop_batch(1)
    assert (retried.symbol, retried.attempts) == ("BAD", 1) and retried.id > number
    assert not queue.failed().exists()


def test_items_filter_by_slot_state(queue: RingDjangoQueue[Tick]) -> None:
    numbers = push(queue, 2)
    queue.pop_batch(1)
    assert [t.id for t in queue.items("ready")] == numbers[1:]
    assert [t.id for t in queue.items("leased")] == numbers[:1]
    assert [t.id for t in queue.items(State.LEASED)] == numbers[:1]
    with pytest.raises(InvalidArgument, match=r"failed\(\)"):
        queue.items("failed")


def test_stats_show_capacity_and_occupancy(queue: RingDjangoQueue[Tick]) -> None:
    push(queue, 2)
    queue.pop_batch(1)
    stats = queue.stats()
    assert (stats["ready"], stats["leased"], stats["capacity"]) == (1, 1, CAPACITY)
    assert stats["occupancy"] == 2 / CAPACITY


def test_the_core_queue_is_cached_per_model_and_database(alias: str) -> None:
    core = Tick.queue.using(alias).core
    assert isinstance(core, RingQueue) and core.capacity == CAPACITY
    assert Tick.queue.using(alias).core is core
    other = "sqlite" if alias == "default" else "default"
    assert Tick.queue.using(other).core is not core  # pop claims belong to one database


# -- bad input -----------------------------------------------------------------------------


def test_a_full_ring_raises_queue_full(queue: RingDjangoQueue[Tick]) -> None:
    numbers = push(queue, CAPACITY)
    with pytest.raises(QueueFull, match="is full") as info:
        queue.push(**tick(99))
    assert info.value.pushed == [None] and info.value.remaining == 1  # one entry per message
    with pytest.raises(QueueFull) as partly:
        queue.push_many([tick(100)])
    assert partly.value.remaining == 1
    # Nothing stored was lost, and once poppers free the slots pushes land again.
    assert [t.id for t in queue.items()] == numbers
    assert len(queue.pop_batch(CAPACITY, mode="at_most_once")) == CAPACITY
    later = queue.push(**tick(101))
    assert [t.id for t in queue.items()] == [later]


def test_a_ring_without_its_tables_raises_queue_table_missing(alias: str) -> None:
    with isolate_apps("tests.django.testapp"):

        class Unmigrated(RingQueueModel):
            symbol = models.CharField(max_length=12)

            class Meta:
                app_label = "testapp"

            class QueueOptions:
                capacity = 4

        with pytest.raises(QueueTableMissing, match="migrate"):
            Unmigrated.queue.using(alias).push(symbol="X")


def test_a_slot_table_of_another_size_is_reported(alias: str, queue: RingDjangoQueue[Tick]) -> None:
    with connections[alias].cursor() as cursor:
        cursor.execute(f"DELETE FROM testapp_tick WHERE slot >= {CAPACITY // 2}")
    with pytest.raises(RingCapacityMismatch, match="declares capacity 8") as info:
        queue.check()
    assert "makemigrations" in str(info.value)


def test_compact_keeps_every_message_in_its_slot(alias: str, queue: RingDjangoQueue[Tick]) -> None:
    for _ in range(3):  # round the ring a few times
        push(queue, CAPACITY)
        queue.ack(queue.pop_batch(CAPACITY))
    numbers = push(queue, 5)
    (leased,) = queue.pop_batch(1)
    result = while_held(queue.compact)
    assert result.compacted is (alias == "default")
    assert queue.ack(leased) == [numbers[0]]
    assert [(t.id, t.symbol) for t in queue.pop_batch(CAPACITY)] == [
        (n, f"S{i}") for i, n in enumerate(numbers) if i
    ]
    assert queue.push(**tick(9)) > max(numbers)
