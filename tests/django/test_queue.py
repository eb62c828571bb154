"""``Model.queue``: what the Django adapter adds over the conformance suite — model instances,
Django's transactions and database aliases, querysets, and query logging."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.db import connections, models, reset_queries, transaction
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext, override_settings
from django.utils import timezone

from dbqueue.errors import (
    InvalidArgument,
    InvalidPayload,
    QueueTableMissing,
    TransactionStateError,
)
from dbqueue.message import State
from dbqueue_django.queue import DjangoQueue
from dbqueue_django.spec import payload_fields
from tests.core.upkeep.support import while_held
from tests.django.factories import JobFactory, payload_of
from tests.django.testapp.models import Job, KeptJob, Ping

pytestmark = [
    pytest.mark.django,
    pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
]
ZERO = dt.timedelta(0)
STATS_KEYS = {
    "ready", "scheduled", "leased", "expired", "done", "failed", "cancelled", "oldest_ready_age"
}  # fmt: skip


@pytest.fixture
def queue(alias: str) -> DjangoQueue[Job]:
    return Job.queue.using(alias)


def make_failed(queue: DjangoQueue[Job], name: str, max_attempts: int = 3) -> int:
    """Push an item and fail it ``max_attempts`` times (no back-off): it ends up failed."""
    item_id = queue.push(name=name)
    for attempt in range(1, max_attempts + 1):
        (job,) = queue.pop_batch(1)
        assert job.pk == item_id
        state = queue.fail(job, f"{name}: attempt {attempt}", delay=ZERO)
        assert state == {item_id: State.FAILED if attempt == max_attempts else State.READY}
    return item_id


# -- model instances ------------------------------------------------------------------------


def test_pop_batch_returns_model_instances(alias: str, queue: DjangoQueue[Job]) -> None:
    before = timezone.now()
    first = queue.push(name="first", priority=5)
    queue.push(name="second")
    jobs = queue.pop_batch(5)
    assert [type(j) for j in jobs] == [Job, Job]
    job = jobs[0]
    assert job.pk == job.id == first and job.name == "first"
    assert job._state.db == alias and job._state.adding is False
    assert (job.attempts, job.priority) == (1, 5)
    slack = dt.timedelta(seconds=5)  # the database's clock against ours
    assert before - slack <= job.run_at <= timezone.now() + slack
    assert job.enqueued_at.utcoffset() is not None and job.last_error is None
    lease = job.lease_until - timezone.now()
    assert dt.timedelta(seconds=20) < lease <= dt.timedelta(seconds=35)  # QueueOptions.lease
    assert job.queue_meta.state == State.LEASED  # the instance is a usable model instance


def test_an_instance_payload_round_trips(alias: str, queue: DjangoQueue[Job]) -> None:
    built = JobFactory.build()
    item_id = queue.push(**payload_of(built))
    # Read through the ORM (the codec's storage format is Django's) ...
    stored = queue.items().get(pk=item_id)
    # ... and popped through the queue.
    (popped,) = queue.pop_batch(1)
    for field in payload_fields(Job):
        expected = getattr(built, field.attname)
        for got in (getattr(stored, field.attname), getattr(popped, field.attname)):
            if isinstance(expected, bytes):
                got = bytes(got)
            assert got == expected, field.name
    assert popped.at.utcoffset() is not None


def test_defaults_fill_in(queue: DjangoQueue[Job]) -> None:
    queue.push(name="bare")
    queue.push_many([{"name": "bare too"}])
    for job in queue.pop_batch(2):
        assert job.n == 0 and job.flag is False
        assert job.doc is None and job.at is None and job.small is None


def test_a_naive_datetime_is_refused_with_use_tz(queue: DjangoQueue[Job]) -> None:
    with pytest.raises(InvalidPayload):
        queue.push(name="naive", at=dt.datetime(2026, 1, 1, 12, 0))
    assert queue.stats()["ready"] == 0


# -- transactions ---------------------------------------------------------------------------


def test_push_in_an_atomic_block_that_raises_leaves_nothing(
    alias: str, queue: DjangoQueue[Job]
) -> None:
    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        queue.push(name="lost")
        queue.push_many([{"name": "lost too"}, {"name": "and this"}])
        raise RuntimeError("the view failed")
    assert Job.objects.using(alias).count() == 0
    assert Job.queue_meta_model._default_manager.using(alias).count() == 0
    assert queue.pop_batch(10) == []


def test_push_and_an_orm_write_commit_together(
    alias: str, queue: DjangoQueue[Job], outside: Callable[[str], int]
) -> None:
    with transaction.atomic(using=alias):
        queue.push(name="welcome mail")
        User.objects.using(alias).create(username="ada")
        assert (outside("testapp_job_meta"), outside("auth_user")) == (0, 0)
    assert (outside("testapp_job"), outside("testapp_job_meta"), outside("auth_user")) == (1, 1, 1)

    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        queue.push(name="second mail")
        User.objects.using(alias).create(username="grace")
        raise RuntimeError
    assert (outside("testapp_job"), outside("testapp_job_meta"), outside("auth_user")) == (1, 1, 1)


def test_fail_in_an_atomic_block_that_raises_is_rolled_back(
    alias: str, queue: DjangoQueue[Job]
) -> None:
    queue.push(name="x")
    (job,) = queue.pop_batch(1)
    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        assert queue.fail(job, ValueError("nope")) == {job.pk: State.READY}
        raise RuntimeError
    (leased,) = queue.items("leased")
    assert leased.pk == job.pk and leased.attempts == 1 and leased.last_error is None
    assert queue.ack(job) == [job.pk]  # the lease token is still the one we hold


def test_missing_tables_inside_atomic_raise_queue_table_missing(
    alias: str, queue: DjangoQueue[Job]
) -> None:
    connection = connections[alias]
    with (
        pytest.raises(QueueTableMissing, match="migrate") as info,
        transaction.atomic(using=alias),
    ):
        with connection.cursor() as cursor:
            cursor.execute('DROP TABLE "testapp_job_meta"')  # rolled back below
        queue.push(name="nowhere to go")
    assert "testapp_job" in str(info.value)
    # The block rolled back the DROP, and the connection is usable again.
    assert "testapp_job_meta" in connection.introspection.table_names()
    item_id = queue.push(name="after")
    assert [j.pk for j in queue.pop_batch(1)] == [item_id]


def test_after_a_caught_queue_error_the_block_refuses_queue_operations(
    alias: str, queue: DjangoQueue[Job]
) -> None:
    """A database error marks the atomic block for rollback; like the ORM, the queue must then
    refuse to run statements, rather than answer as if they had worked (SQLite) or raise a raw
    driver error (PostgreSQL) — the block is rolled back at its end either way."""
    connection = connections[alias]
    waiting = queue.push(name="waiting")
    with transaction.atomic(using=alias):
        with connection.cursor() as cursor:
            cursor.execute('DROP TABLE "testapp_ping_meta"')  # rolled back below
        with pytest.raises(QueueTableMissing):
            Ping.queue.using(alias).stats()
        assert connection.needs_rollback
        with pytest.raises(TransactionManagementError):
            User.objects.using(alias).count()
        with pytest.raises(TransactionManagementError):
            queue.pop_batch(1)
    assert "testapp_ping_meta" in connection.introspection.table_names()
    assert [j.pk for j in queue.items("ready")] == [waiting]


# -- aliases ----------------------------------------------------------------------------------


@pytest.mark.postgresql
@pytest.mark.sqlite
def test_using_routes_to_another_database() -> None:
    assert Job.queue.alias == "default"
    on_sqlite = Job.queue.using("sqlite")
    assert on_sqlite.alias == "sqlite" and on_sqlite.model is Job
    lite_id = on_sqlite.push(name="lite")
    assert Job.queue.stats()["ready"] == 0
    assert not Job.objects.using("default").filter(name="lite").exists()
    pg_id = Job.queue.push(name="pg")
    assert on_sqlite.stats()["ready"] == 1
    assert [j.name for j in Job.queue.pop_batch(5)] == ["pg"]
    (lite,) = on_sqlite.pop_batch(5)
    assert (lite.pk, lite.name, lite._state.db) == (lite_id, "lite", "sqlite")
    assert list(Job.objects.using("default").values_list("pk", flat=True)) == [pg_id]
    assert list(Job.objects.using("sqlite").values_list("pk", flat=True)) == [lite_id]


# -- querysets and administration -------------------------------------------------------------


def test_items_by_state(queue: DjangoQueue[Job]) -> None:
    ids = queue.push_many([{"name": str(i)} for i in range(3)])
    (job,) = queue.pop_batch(1)
    items = queue.items()
    assert isinstance(items, models.QuerySet) and items.model is Job
    assert sorted(items.values_list("pk", flat=True)) == ids
    leased = list(queue.items("leased"))
    assert [j.pk for j in leased] == [job.pk]
    assert (leased[0].state, leased[0].attempts) == (State.LEASED, 1)
    assert leased[0].lease_until is not None
    assert sorted(queue.items(State.READY).values_list("pk", flat=True)) == ids[1:]
    assert queue.items(1).count() == 1 and queue.items("failed").count() == 0
    with pytest.raises(InvalidArgument, match="unknown state"):
        queue.items("finished")


def test_failed_is_a_queryset_with_attempts_and_last_error(queue: DjangoQueue[Job]) -> None:
    first = make_failed(queue, "first")
    second = make_failed(queue, "second")
    queue.push(name="healthy")
    failed = queue.failed()
    assert isinstance(failed, models.QuerySet) and failed.model is Job
    assert [j.pk for j in failed] == [second, first]  # the most recent failure first
    job = failed.get(pk=first)
    assert job.attempts == 3 and job.state == State.FAILED
    assert job.last_error == "first: attempt 3"
    assert job.run_at <= timezone.now()
    assert failed.filter(name="second").count() == 1  # an ordinary queryset


def test_stats_keys(queue: DjangoQueue[Job]) -> None:
    stats = queue.stats()
    assert set(stats) == STATS_KEYS
    make_failed(queue, "bad")
    queue.push(name="now")
    queue.push(name="later", delay=dt.timedelta(hours=1))
    stats = queue.stats()
    assert (stats["ready"], stats["scheduled"], stats["failed"], stats["leased"]) == (1, 1, 1, 0)
    assert isinstance(stats["oldest_ready_age"], dt.timedelta)


def test_retry_accepts_instances_from_failed(queue: DjangoQueue[Job]) -> None:
    ids = [make_failed(queue, name) for name in ("a", "b", "c")]
    assert queue.retry(queue.failed().filter(name__in=["a", "b"])) == 2  # a queryset
    ready = list(queue.items("ready").order_by("pk"))
    assert [j.pk for j in ready] == ids[:2] and [j.attempts for j in ready] == [0, 0]
    assert queue.retry(list(queue.failed())) == 1  # a list of instances
    assert queue.failed().count() == 0
    assert sorted(queue.items("ready").values_list("pk", flat=True)) == ids


def test_a_keep_done_model_keeps_acked_items_as_done(alias: str) -> None:
    kept = KeptJob.queue.using(alias)
    assert kept.spec.options.keep_done is True and Job.queue.spec.options.keep_done is False
    first, second, third = kept.push_many([{"name": n} for n in ("a", "b", "c")])
    assert kept.ack(kept.pop_batch(1)) == [first]
    assert [j.pk for j in kept.pop_batch(1, mode="at_most_once")] == [second]
    done = kept.items("done").order_by("pk")
    assert isinstance(done, models.QuerySet) and done.model is KeptJob
    assert [(j.pk, j.name, j.state, j.attempts) for j in done] == [
        (first, "a", State.DONE, 1), (second, "b", State.DONE, 1),
    ]  # fmt: skip
    assert all(j.lease_until is None and j.run_at <= timezone.now() for j in done)
    assert kept.stats()["done"] == 2
    assert kept.retry([first]) == 0  # done, not failed
    assert kept.purge("done") == 2
    assert list(kept.items().values_list("pk", flat=True)) == [third]
    assert KeptJob.objects.using(alias).count() == 1


def test_fail_with_an_exception_stores_its_type_and_message(
    alias: str, queue: DjangoQueue[Job]
) -> None:
    queue.push(name="x")
    (job,) = queue.pop_batch(1)
    with pytest.raises(ValueError, match="invalid literal") as info:
        int("not a number")
    assert queue.fail(job, info.value) == {job.pk: State.READY}
    stored = Job.objects.using(alias).get(pk=job.pk)
    assert stored.last_error == "ValueError: invalid literal for int() with base 10: 'not a number'"
    (ready,) = queue.items("ready")
    assert ready.run_at > timezone.now()  # backed off


def test_a_run_at_written_through_the_orm_is_honoured(alias: str, queue: DjangoQueue[Job]) -> None:
    """Rescheduling from the admin (the meta model) is read back correctly by the queue."""
    item_id = queue.push(name="tomorrow", delay=dt.timedelta(days=1))
    assert queue.pop_batch(1) == []
    meta = Job.queue_meta_model._default_manager.using(alias)
    assert meta.filter(pk=item_id).update(run_at=timezone.now() - dt.timedelta(seconds=1)) == 1
    assert [j.pk for j in queue.pop_batch(1)] == [item_id]


# -- query logging ------------------------------------------------------------------------------


def test_queue_statements_are_captured(alias: str, queue: DjangoQueue[Job]) -> None:
    with CaptureQueriesContext(connections[alias]) as ctx:
        queue.push(name="logged")
        queue.pop_batch(1)
    statements = [q["sql"] for q in ctx.captured_queries]
    assert any("INSERT INTO" in s and '"testapp_job"' in s for s in statements), statements
    assert any('"testapp_job_meta"' in s and "lease_until" in s for s in statements[1:])
    assert all("time" in q for q in ctx.captured_queries)


def test_debug_true_records_statements_in_connection_queries(
    alias: str, queue: DjangoQueue[Job]
) -> None:
    connection = connections[alias]
    logged = len(connection.queries_log)
    queue.push(name="before debug")
    assert len(connection.queries_log) == logged  # DEBUG is False: nothing recorded
    with override_settings(DEBUG=True):
        reset_queries()
        queue.stats()
        assert len(connection.queries) >= 1
        assert any('"testapp_job_meta"' in q["sql"] for q in connection.queries)
        reset_queries()


def test_compact_keeps_every_item_as_it_was(alias: str, queue: DjangoQueue[Job]) -> None:
    ids = queue.push_many([{"name": f"job {i}", "n": i} for i in range(5)])
    (leased,) = queue.pop_batch(1)
    result = while_held(queue.compact)
    if alias == "default":  # PostgreSQL: the tables are rewritten to their live rows
        assert result.compacted and result.size_after <= result.size_before
    else:
        assert (result.compacted, result.skipped) == (False, "sqlite keeps no dead versions")
    assert queue.ack(leased) == [ids[0]]  # the lease token still holds
    assert [(j.id, j.name) for j in queue.pop_batch(10)] == [
        (i, f"job {n}") for n, i in enumerate(ids) if n
    ]
    assert queue.push(name="after") > max(ids)


@pytest.mark.postgresql
def test_compact_inside_atomic_is_refused() -> None:
    with transaction.atomic(), pytest.raises(TransactionStateError, match="outside a transaction"):
        Job.queue.compact()
