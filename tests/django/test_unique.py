"""Unique items (issue 22 §2) through the Django front: the declaration (fields by name, a
ForeignKey's by its name or attname), pushes with declared fields and with keys of their own,
each scope, ``push_many``, the ORM's ``create()``/``save()``/``bulk_create()``, the async
twin, the admin's pages, and pushers of one key racing in open transactions on PostgreSQL.
What ``makemigrations`` writes is in test_unique_migrations.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.apps.registry import Apps
from django.db import connections, models, transaction
from django.test import Client

from dbqueue.errors import InvalidArgument, InvalidSpec
from dbqueue.message import State
from dbqueue.unique import Pushed, UniqueScope
from dbqueue_django.models import QueueModel, TaskRun
from dbqueue_django.queue import DjangoQueue
from dbqueue_django.spec import has_unique_keys, spec_for_model
from tests.django.admin_users import login_superuser
from tests.django.testapp.models import Ping, QueuedUniqueJob, StoredUniqueJob, UniqueJob
from tests.races import race_one_key

pytestmark = [
    pytest.mark.django,
    pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
]


@pytest.fixture
def queue(alias: str) -> DjangoQueue[UniqueJob]:
    return UniqueJob.queue.using(alias)


# -- the declaration ------------------------------------------------------------------------


def isolated_model(name: str, options: dict[str, Any]) -> type[Any]:
    """A queue model with a ForeignKey, declared in a registry of its own (never migrated)."""

    registry = Apps(["tests.django.testapp"])
    attrs: dict[str, Any] = {
        "__module__": __name__,
        "Meta": type("Meta", (), {"app_label": "testapp", "apps": registry}),
        "QueueOptions": type("QueueOptions", (), options),
        # To a model whose key is a stored kind (an AutoField key is not one).
        "order": models.ForeignKey(TaskRun, on_delete=models.CASCADE, db_constraint=False),
        "note": models.TextField(default=""),
    }
    return type(name, (QueueModel,), attrs)


def test_declared_fields_are_the_cores_columns() -> None:
    assert UniqueJob.queue.spec.options.unique == ("account", "kind")
    assert UniqueJob.queue.spec.options.unique_scope_mode is UniqueScope.UNFINISHED
    assert QueuedUniqueJob.queue.spec.options.unique_scope is UniqueScope.QUEUED
    assert StoredUniqueJob.queue.spec.options.unique == ()
    assert all(has_unique_keys(m) for m in (UniqueJob, QueuedUniqueJob, StoredUniqueJob))
    assert not has_unique_keys(Ping)


@pytest.mark.parametrize("name", ["order", "order_id"])
def test_a_foreign_key_is_named_by_its_name_or_attname(name: str) -> None:
    model = isolated_model("Purchase", {"unique": (name, "note")})
    assert spec_for_model(model).options.unique == ("order_id", "note")
    meta = model.queue_meta_model._meta
    assert meta.get_field("unique_key").null
    (constraint,) = meta.constraints
    assert constraint.fields == ("unique_key",)


def test_an_unknown_name_is_an_error_that_names_the_model() -> None:
    model = isolated_model("Refund", {"unique": ("order", "amount")})
    # The class is made (the system check reports the error), without a key column.
    assert not has_unique_keys(model)
    with pytest.raises(InvalidSpec, match=r"testapp\.Refund\.QueueOptions: unique names 'amount'"):
        spec_for_model(model)


# -- pushes -------------------------------------------------------------------------------


def test_a_push_of_the_same_fields_returns_the_item_already_there(
    queue: DjangoQueue[UniqueJob],
) -> None:
    first = queue.push(account="acme", note="first")
    again = queue.push(account="acme", note="second")
    other = queue.push(account="acme", kind="bill")
    assert isinstance(first, Pushed) and not first.duplicate
    assert again == first and again.duplicate
    assert other != first and not other.duplicate
    assert queue.count() == 2
    (item,) = queue.items().filter(pk=first)
    assert item.note == "first"
    assert item.unique_key == '{"account":"acme","kind":"sync"}'


def test_a_key_of_its_own_replaces_the_fields(queue: DjangoQueue[UniqueJob]) -> None:
    first = queue.push(account="acme", unique_key="nightly")
    again = queue.push(account="other", unique_key="nightly")
    assert again == first and again.duplicate
    assert queue.items().get(pk=first).unique_key == "nightly"
    with pytest.raises(InvalidArgument, match="unique_key must be a non-empty str"):
        queue.push(account="acme", unique_key="")


def test_apush_returns_a_pushed_too(queue: DjangoQueue[UniqueJob]) -> None:
    async def view() -> tuple[Pushed, Pushed]:
        return await queue.apush(account="acme"), await queue.apush(account="acme")

    first, again = async_to_sync(view)()
    assert not first.duplicate and again.duplicate and again == first


def test_a_queue_without_unique_items_refuses_a_key(alias: str) -> None:
    with pytest.raises(InvalidArgument, match="has no unique items"):
        Ping.queue.using(alias).push(message="m", unique_key="k")


# -- scopes -------------------------------------------------------------------------------


def test_unfinished_holds_the_key_while_leased_and_frees_it_when_done(
    queue: DjangoQueue[UniqueJob],
) -> None:
    first = queue.push(account="acme")
    (leased,) = queue.pop_batch(1)
    assert queue.push(account="acme") == first
    queue.ack(leased)
    second = queue.push(account="acme")
    assert second != first and not second.duplicate


def test_unfinished_frees_the_key_of_a_failed_item(queue: DjangoQueue[UniqueJob]) -> None:
    first = queue.push(account="acme")
    for _ in range(2):  # max_attempts = 2, no back-off
        queue.fail(queue.pop_batch(1), "boom")
    assert queue.items(State.FAILED).get().pk == first
    second = queue.push(account="acme")
    assert second != first and not second.duplicate
    assert queue.retry([first]) == 0  # its key is held again: it stays failed


def test_queued_frees_the_key_at_the_lease(alias: str) -> None:
    queue = QueuedUniqueJob.queue.using(alias)
    first = queue.push(tag="t")
    assert queue.push(tag="t") == first
    queue.pop_batch(1)
    second = queue.push(tag="t")
    assert second != first and not second.duplicate


def test_stored_holds_a_given_key_until_the_row_is_gone(alias: str) -> None:
    queue = StoredUniqueJob.queue.using(alias)
    first = queue.push(tag="t", unique_key="once")
    queue.ack(queue.pop_batch(1))  # kept as done (keep_done)
    again = queue.push(tag="t", unique_key="once")
    assert again == first and again.duplicate
    assert not queue.push(tag="t").duplicate  # no declared fields: no key, no dedup
    assert not queue.push(tag="t").duplicate
    queue.delete([first])
    assert not queue.push(tag="t", unique_key="once").duplicate


# -- many at once, and the ORM --------------------------------------------------------------


def test_push_many_reports_duplicates_in_and_out_of_the_batch(
    queue: DjangoQueue[UniqueJob],
) -> None:
    held = queue.push(account="a")
    pushed = queue.push_many(
        [{"account": "a"}, {"account": "b"}, {"account": "b", "note": "later"}, {"account": "c"}]
    )
    assert [p.duplicate for p in pushed] == [True, False, True, False]
    assert pushed[0] == held and pushed[2] == pushed[1]
    assert queue.count() == 3


def test_create_of_a_duplicate_comes_back_as_the_item_there(alias: str) -> None:
    first = UniqueJob.objects.using(alias).create(account="acme", note="first")
    again = UniqueJob.objects.using(alias).create(account="acme", note="second")
    assert type(again.pk) is int and again.pk == first.pk
    stored = UniqueJob.objects.using(alias).get(pk=first.pk)
    assert again.note == "first" and again.enqueued_at == stored.enqueued_at
    assert not again._state.adding and again._state.db == alias
    assert UniqueJob.queue.using(alias).count() == 1
    unsaved = UniqueJob(account="acme", note="third")
    unsaved.save(using=alias)
    assert (unsaved.pk, unsaved.note) == (first.pk, "first")


def test_bulk_create_gives_each_duplicate_its_holder(alias: str) -> None:
    held = UniqueJob.queue.using(alias).push(account="a", note="held")
    objs = UniqueJob.objects.using(alias).bulk_create(
        [
            UniqueJob(account="a", note="x"),
            UniqueJob(account="b", note="first b"),
            UniqueJob(account="b", note="second b"),
        ]
    )
    assert [o.pk for o in objs] == [held, objs[1].pk, objs[1].pk]
    assert [o.note for o in objs] == ["held", "first b", "first b"]
    assert UniqueJob.queue.using(alias).count() == 2


def test_a_duplicate_push_that_rolls_back_leaves_the_holder(alias: str) -> None:
    first = UniqueJob.queue.using(alias).push(account="acme")
    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        assert UniqueJob.queue.using(alias).push(account="acme").duplicate
        raise RuntimeError
    assert UniqueJob.queue.using(alias).push(account="acme") == first


# -- the admin ------------------------------------------------------------------------------

CHANGELIST = "/admin/testapp/uniquejob/"


@pytest.fixture
def superuser(routed: str, client: Client) -> Client:
    return login_superuser(client)


def test_the_list_shows_and_searches_the_keys(routed: str, superuser: Client) -> None:
    queue = UniqueJob.queue.using(routed)
    acme, other = queue.push(account="acme"), queue.push(account="globex", kind="bill")
    response = superuser.get(CHANGELIST)
    assert response.status_code == 200
    page = response.content.decode()
    assert "unique key" in page.lower()
    assert "{&quot;account&quot;:&quot;acme&quot;,&quot;kind&quot;:&quot;sync&quot;}" in page
    found = superuser.get(CHANGELIST, {"q": "globex"}).context["cl"].result_list
    assert [o.pk for o in found] == [other]
    found = superuser.get(CHANGELIST, {"q": "acme"}).context["cl"].result_list
    assert [o.pk for o in found] == [acme]


def test_the_item_page_shows_the_key(routed: str, superuser: Client) -> None:
    item = UniqueJob.queue.using(routed).push(account="acme", unique_key="nightly-acme")
    page = superuser.get(f"{CHANGELIST}{item}/change/").content.decode()
    assert "Unique key" in page and "nightly-acme" in page


def test_a_queue_without_keys_shows_no_key_column(routed: str, superuser: Client) -> None:
    Ping.queue.using(routed).push(message="m")
    assert "unique key" not in superuser.get("/admin/testapp/ping/").content.decode().lower()


# -- pushers racing -------------------------------------------------------------------------


def conninfo(alias: str) -> dict[str, Any]:
    """psycopg.connect()'s arguments for ``alias``'s database."""
    params = connections[alias].get_connection_params()
    keys = ("dbname", "user", "password", "host", "port")
    return {k: params[k] for k in keys if params.get(k)}


@pytest.mark.postgresql
@pytest.mark.parametrize("alias", ["default"])
def test_pushers_of_one_key_in_open_transactions_make_one_item(alias: str) -> None:
    """Six threads, each on its own Django connection, push one key in an atomic block
    (tests/races.py): no error, one item, every push returns it."""

    def push(hold: Callable[[Pushed], None]) -> None:
        try:
            with transaction.atomic(using=alias):
                hold(UniqueJob.queue.using(alias).push(account="race"))
        finally:
            connections.close_all()  # this thread's connections

    meta = UniqueJob.queue_meta_model._meta.db_table
    race_one_key(6, conninfo(alias), meta, push)
    assert UniqueJob.queue.using(alias).count() == 1
    assert UniqueJob.objects.using(alias).count() == 1
