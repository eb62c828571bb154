"""What the ORM does on a queue model (dbqueue_django.orm): creating a row pushes, deleting one
deletes the whole message, a ring's slots are the queue's to write."""

from __future__ import annotations

import pytest
from django.db import connections, transaction

from dbqueue.errors import InvalidArgument, InvalidPayload
from tests.django.aliases import ALIASES
from tests.django.testapp.models import Ping, Tick

pytestmark = [
    pytest.mark.django,
    pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
]


def rows(alias: str, sql: str) -> int:
    with connections[alias].cursor() as cursor:
        cursor.execute(sql)
        return int(cursor.fetchone()[0])


def split_rows(alias: str) -> tuple[int, int]:
    """(data rows, meta rows) of Ping."""
    return rows(alias, 'SELECT count(*) FROM "testapp_ping"'), rows(
        alias, 'SELECT count(*) FROM "testapp_ping_meta"'
    )


# -- split -------------------------------------------------------------------------------------


@pytest.mark.parametrize("alias", ALIASES)
def test_create_save_and_bulk_create_push(alias: str) -> None:
    with transaction.atomic(using=alias):
        a = Ping.objects.using(alias).create(message="a")
        b = Ping(message="b")
        b.save(using=alias)
        c, d = Ping.objects.using(alias).bulk_create([Ping(message="c"), Ping(message="d")])
    assert [a.pk, b.pk, c.pk, d.pk] == sorted({a.pk, b.pk, c.pk, d.pk})
    assert not b._state.adding and b._state.db == alias
    queue = Ping.queue.using(alias)
    assert queue.stats()["ready"] == 4
    got = queue.pop_batch(10)
    assert [(p.pk, p.message) for p in got] == [(a.pk, "a"), (b.pk, "b"), (c.pk, "c"), (d.pk, "d")]
    queue.ack(got)


@pytest.mark.parametrize("alias", ALIASES)
def test_a_push_through_the_orm_is_validated_and_joins_the_transaction(alias: str) -> None:
    with pytest.raises(InvalidPayload):
        Ping.objects.using(alias).create(message=None)
    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        Ping.objects.using(alias).create(message="rolled back")
        raise RuntimeError
    assert split_rows(alias) == (0, 0)


@pytest.mark.parametrize("alias", ALIASES)
def test_a_new_item_cannot_choose_its_id(alias: str) -> None:
    with pytest.raises(InvalidArgument, match="cannot choose its id"):
        Ping.objects.using(alias).create(id=77, message="x")
    with pytest.raises(InvalidArgument, match="no conflicts"):
        Ping.objects.using(alias).bulk_create([Ping(message="x")], ignore_conflicts=True)
    assert split_rows(alias) == (0, 0)


@pytest.mark.parametrize("alias", ALIASES)
def test_deleting_through_the_orm_deletes_the_whole_message(alias: str) -> None:
    queue = Ping.queue.using(alias)
    a, b, c, d = queue.push_many([{"message": m} for m in "abcd"])
    Ping.objects.using(alias).get(pk=a).delete()
    Ping.objects.using(alias).filter(pk__in=[b, c]).delete()
    assert split_rows(alias) == (1, 1)
    (got,) = queue.pop_batch(10)  # never an item with every field None
    assert (got.pk, got.message) == (d, "d")
    got.delete()  # a leased one too
    assert split_rows(alias) == (0, 0)
    assert queue.stats()["leased"] == 0


@pytest.mark.parametrize("alias", ALIASES)
def test_saving_an_existing_item_updates_its_payload(alias: str) -> None:
    queue = Ping.queue.using(alias)
    pk = queue.push(message="before")
    item = Ping.objects.using(alias).get(pk=pk)
    item.message = "after"
    item.save()
    (got,) = queue.pop_batch(1)
    assert (got.pk, got.message, got.attempts) == (pk, "after", 1)
    queue.ack([got])


# -- ring --------------------------------------------------------------------------------------


@pytest.mark.parametrize("alias", ALIASES)
def test_creating_a_ring_row_pushes(alias: str) -> None:
    tick = Tick.objects.using(alias).create(symbol="A", price=1)
    more = Tick.objects.using(alias).bulk_create([Tick(symbol="B", price=2)])
    assert tick.id >= 0 and tick.slot == tick.id % 8 and more[0].id == tick.id + 1
    got = Tick.queue.using(alias).pop_batch(5)
    assert [(t.id, t.symbol) for t in got] == [(tick.id, "A"), (more[0].id, "B")]
    Tick.queue.using(alias).ack(got)


@pytest.mark.parametrize("alias", ALIASES)
def test_deleting_a_ring_row_deletes_its_message_and_keeps_the_slot(alias: str) -> None:
    queue = Tick.queue.using(alias)
    a, b, c = queue.push_many([{"symbol": s, "price": 1} for s in "abc"])
    queue.items().get(seq=a).delete()
    assert Tick.objects.using(alias).filter(seq__in=[b, c]).delete() == (2, {"testapp.Tick": 2})
    assert rows(alias, 'SELECT count(*) FROM "testapp_tick"') == 8  # every slot is still there
    assert queue.stats()["ready"] == 0
    assert queue.pop_batch(5) == []


@pytest.mark.parametrize("alias", ALIASES)
def test_a_ring_slot_is_written_by_its_queue_only(alias: str) -> None:
    queue = Tick.queue.using(alias)
    number = queue.push(symbol="a", price=1)
    tick = queue.items().get(seq=number)
    tick.symbol = "changed"
    with pytest.raises(InvalidArgument, match="written by its queue only"):
        tick.save()
    with pytest.raises(InvalidArgument, match="written by its queue only"):
        Tick.objects.using(alias).filter(seq=number).update(symbol="changed")
    (got,) = queue.pop_batch(1)
    assert got.symbol == "a"
    queue.ack([got])
