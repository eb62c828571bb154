"""Unique items in the core (dbqueue.unique), on PostgreSQL and SQLite: keys from declared
fields and given ones, each scope, periods, push_many, retry, the refusals, and pushers of
one key racing in open transactions (PostgreSQL)."""

from __future__ import annotations

import datetime as dt
import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from dbqueue import (
    Field,
    FieldKind,
    InvalidArgument,
    InvalidSpec,
    Pushed,
    QueueOptions,
    QueueSpec,
    RingQueue,
    SplitQueue,
    State,
    UniqueKeyConflict,
    UniqueScope,
    UnsupportedOperation,
    get_dialect,
)
from dbqueue.drivers import executor_for
from dbqueue.executor import Executor
from dbqueue.schema import create_statements
from dbqueue.spec import options_from
from dbqueue.unique import DIGEST_PREFIX, MAX_KEY_LENGTH, derived_key, index_predicate
from tests.core.backends import BACKENDS, connect
from tests.races import race_one_key

FIELDS = (
    Field("order_id", FieldKind.INTEGER),
    Field("kind", FieldKind.TEXT, default="email"),
    Field("note", FieldKind.TEXT, nullable=True),
)


@dataclass
class Bed:
    """A way to make unique queues of any options on one connection."""

    backend: str
    conn: Any
    table: str
    made: list[QueueSpec]

    def queue(self, **options: Any) -> tuple[SplitQueue, Executor]:
        dialect = get_dialect(self.backend)
        spec = QueueSpec(f"{self.table}_{len(self.made)}", FIELDS, QueueOptions(**options))
        ex = executor_for(dialect, self.conn)
        for statement in create_statements(spec, dialect):
            ex.execute(statement, {})
        self.made.append(spec)
        return SplitQueue(spec, dialect), ex


@pytest.fixture(params=BACKENDS)
def bed(request: pytest.FixtureRequest, table_name: str) -> Iterator[Bed]:
    backend = request.param
    conn = connect(request, backend)
    made: list[QueueSpec] = []
    yield Bed(backend, conn, table_name, made)
    if not isinstance(conn, sqlite3.Connection):
        for spec in made:
            conn.execute(f'DROP TABLE "{spec.table}", "{spec.meta_table}", "{spec.head_table}"')
    conn.close()


def keys(ex: Executor, q: SplitQueue) -> dict[int, tuple[State, str | None]]:
    """Each item's state and stored key, by id."""
    rows = ex.execute(f'SELECT id, state, unique_key FROM "{q.spec.meta_table}"', {})
    return {int(i): (State(s), k) for i, s, k in rows}


def test_a_push_of_the_same_fields_returns_the_item_already_there(bed: Bed) -> None:
    q, ex = bed.queue(unique=("order_id", "kind"))
    first = q.push(ex, {"order_id": 1})
    again = q.push(ex, {"order_id": 1, "kind": "email", "note": "not compared"})
    other_kind = q.push(ex, {"order_id": 1, "kind": "sms"})
    other_order = q.push(ex, {"order_id": 2})
    assert isinstance(first, Pushed) and not first.duplicate
    assert again == first and again.duplicate
    assert not other_kind.duplicate and not other_order.duplicate
    assert len({first, other_kind, other_order}) == 3
    # The duplicate wrote nothing: three items, three data rows.
    assert q.stats(ex).ready == 3
    assert ex.execute(f'SELECT count(*) FROM "{q.spec.table}"', {})[0][0] == 3
    # A left-out field takes its default in the key, as in the item.
    assert keys(ex, q)[first][1] == derived_key(
        ("order_id", "kind"), {"order_id": 1, "kind": "email"}
    )


def test_a_given_key_replaces_the_fields_and_a_queue_without_fields_takes_only_given_ones(
    bed: Bed,
) -> None:
    q, ex = bed.queue(unique_scope="unfinished")
    plain = [q.push(ex, {"order_id": 1}), q.push(ex, {"order_id": 1})]
    assert plain[0] != plain[1]  # no key: not deduplicated
    keyed = q.push(ex, {"order_id": 1}, unique_key="sync:customer:7")
    assert q.push(ex, {"order_id": 9}, unique_key="sync:customer:7") == keyed
    fields, fex = bed.queue(unique="order_id")  # a name is accepted for a one-field tuple
    a = fields.push(fex, {"order_id": 1}, unique_key="mine")
    assert not fields.push(fex, {"order_id": 1}).duplicate  # its key is "mine", not the fields'
    assert fields.push(fex, {"order_id": 2}, unique_key="mine") == a


def test_unfinished_keeps_the_key_while_leased_and_frees_it_when_done_failed_or_cancelled(
    bed: Bed,
) -> None:
    q, ex = bed.queue(unique=("order_id",), max_attempts=1)
    first = q.push(ex, {"order_id": 1})
    (job,) = q.pop_batch(ex, 1)
    assert q.push(ex, {"order_id": 1}) == first  # leased: still held
    q.fail(ex, job, "boom")
    failed_then = q.push(ex, {"order_id": 1})
    assert not failed_then.duplicate  # a failed item frees its key
    # Its retry would make a second item of the key: it stays failed.
    assert q.retry(ex, [first]) == 0
    assert keys(ex, q)[first][0] is State.FAILED
    q.cancel(ex, [failed_then])
    after_cancel = q.push(ex, {"order_id": 1})
    assert not after_cancel.duplicate
    (job,) = q.pop_batch(ex, 1)
    q.ack(ex, job)
    assert not q.push(ex, {"order_id": 1}).duplicate  # done (deleted): free
    # With no other holder, a failed item's retry keeps its key.
    solo = q.push(ex, {"order_id": 5})
    (job,) = [m for m in q.pop_batch(ex, 10) if m.id == solo]
    q.fail(ex, job, "boom")
    assert q.retry(ex, [solo]) == 1
    assert q.push(ex, {"order_id": 5}) == solo


def test_queued_frees_the_key_at_the_lease_and_a_retry_is_not_deduplicated(bed: Bed) -> None:
    q, ex = bed.queue(unique=("order_id",), unique_scope="queued", max_attempts=1)
    first = q.push(ex, {"order_id": 1})
    assert q.push(ex, {"order_id": 1}) == first
    (job,) = q.pop_batch(ex, 1)
    assert keys(ex, q)[first] == (State.LEASED, None)
    during = q.push(ex, {"order_id": 1})  # a push while it runs is a new item
    assert not during.duplicate
    q.fail(ex, job, "boom")
    assert q.retry(ex, [first]) == 1  # keyless now: nothing to collide with
    assert keys(ex, q)[first] == (State.READY, None)
    assert q.push(ex, {"order_id": 1}) == during


def test_stored_holds_the_key_in_every_state_until_the_row_is_gone(bed: Bed) -> None:
    q, ex = bed.queue(unique=("order_id",), unique_scope="stored", keep_done=True)
    first = q.push(ex, {"order_id": 1})
    (job,) = q.pop_batch(ex, 1)
    q.ack(ex, job)
    assert keys(ex, q)[first][0] is State.DONE
    assert q.push(ex, {"order_id": 1}) == first
    q.purge(ex, "done")
    assert not q.push(ex, {"order_id": 1}).duplicate


def test_a_period_makes_one_item_per_key_per_period(bed: Bed) -> None:
    q, ex = bed.queue(
        unique=("order_id",), unique_scope="stored", unique_period=dt.timedelta(hours=1)
    )
    first = q.push(ex, {"order_id": 1})
    assert q.push(ex, {"order_id": 1}) == first
    ((_, key),) = keys(ex, q).values()
    base, _, start = str(key).rpartition("@")
    assert base == derived_key(("order_id",), {"order_id": 1})
    period_start = dt.datetime.strptime(start, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    now = dt.datetime.now(dt.UTC)
    assert period_start.minute == period_start.second == 0
    assert now - dt.timedelta(hours=1, minutes=1) < period_start <= now + dt.timedelta(minutes=1)
    # The next period's item is another one: a key stored for a period long gone is not held.
    _set_key(ex, q, first, f"{base}@2000-01-01T00:00:00Z", bed.backend)
    assert not q.push(ex, {"order_id": 1}).duplicate


def _set_key(ex: Executor, q: SplitQueue, item_id: int, key: str, backend: str) -> None:
    param = "%(key)s" if backend == "postgresql" else ":key"
    ex.execute(
        f'UPDATE "{q.spec.meta_table}" SET unique_key = {param} WHERE id = {int(item_id)}',
        {"key": key},
    )


def test_push_many_returns_each_rows_item_with_duplicates_in_and_out_of_the_batch(
    bed: Bed,
) -> None:
    q, ex = bed.queue(unique=("order_id",))
    there = q.push(ex, {"order_id": 2})
    rows = [{"order_id": 1}, {"order_id": 2}, {"order_id": 1}, {"order_id": 3}]
    pushed = q.push_many(ex, rows, batch_size=3)
    assert [p.duplicate for p in pushed] == [False, True, True, False]
    assert pushed[1] == there and pushed[2] == pushed[0]
    assert pushed[0] < pushed[3]  # written rows keep the input order
    assert q.stats(ex).ready == 3
    assert ex.execute(f'SELECT count(*) FROM "{q.spec.table}"', {})[0][0] == 3
    popped = q.pop_batch(ex, 10)
    assert sorted(m.payload["order_id"] for m in popped) == [1, 2, 3]


def test_a_duplicate_push_in_a_transaction_that_rolls_back_leaves_the_holder(bed: Bed) -> None:
    q, ex = bed.queue(unique=("order_id",))
    first = q.push(ex, {"order_id": 1})
    with pytest.raises(RuntimeError), ex.atomic():
        assert q.push(ex, {"order_id": 1}) == first
        assert not q.push(ex, {"order_id": 2}).duplicate
        raise RuntimeError("roll back")
    assert set(keys(ex, q)) == {first}
    assert not q.push(ex, {"order_id": 2}).duplicate


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("", "non-empty str"),
        (7, "non-empty str"),
        ("x" * (MAX_KEY_LENGTH + 1), f"at most {MAX_KEY_LENGTH}"),
        ("a\x00b", "NUL"),
    ],
)
def test_a_bad_key_is_refused_before_any_sql_and_the_connection_stays_usable(
    bed: Bed, key: Any, message: str
) -> None:
    q, ex = bed.queue(unique=("order_id",))
    with pytest.raises(InvalidArgument, match=message):
        q.push(ex, {"order_id": 1}, unique_key=key)
    assert not q.push(ex, {"order_id": 1}).duplicate


def test_a_long_derived_key_is_stored_as_its_digest(bed: Bed) -> None:
    q, ex = bed.queue(unique=("order_id", "note"))
    long_note = "n" * 1000
    first = q.push(ex, {"order_id": 1, "note": long_note})
    stored = keys(ex, q)[first][1]
    assert stored is not None and stored.startswith(DIGEST_PREFIX) and len(stored) < MAX_KEY_LENGTH
    assert q.push(ex, {"order_id": 1, "note": long_note}) == first
    assert not q.push(ex, {"order_id": 1, "note": long_note + "!"}).duplicate


def test_a_queue_without_unique_items_refuses_a_key(bed: Bed) -> None:
    q, ex = bed.queue()
    with pytest.raises(InvalidArgument, match="has no unique items"):
        q.push(ex, {"order_id": 1}, unique_key="k")
    assert "unique_key" not in q.statements["split_push"].parts[0]


def test_the_declaration_is_checked() -> None:
    with pytest.raises(InvalidSpec, match="not a payload field"):
        QueueSpec("jobs", FIELDS, QueueOptions(unique=("missing",)))
    with pytest.raises(InvalidSpec, match="unique_scope must be one of"):
        QueueOptions(unique_scope="forever")  # type: ignore[arg-type]
    with pytest.raises(InvalidSpec, match="whole seconds"):
        QueueOptions(unique=("a",), unique_period=dt.timedelta(milliseconds=1500))
    with pytest.raises(InvalidSpec, match="names a field twice"):
        QueueOptions(unique=("a", "a"))
    with pytest.raises(InvalidSpec, match="split queues only"):
        QueueOptions(capacity=8, unique=("a",))
    with pytest.raises(InvalidSpec, match="unique_scope is an option of split queues only"):
        options_from({"capacity": 8, "unique_scope": "queued"}, label="Ring",
                     ring=True, aware_datetimes=True, ring_hint="")  # fmt: skip
    options = QueueOptions(unique=["a"])  # type: ignore[arg-type]
    assert options.unique == ("a",) and options.unique_scope_mode is UniqueScope.UNFINISHED
    assert QueueOptions(unique_scope="queued").is_unique  # type: ignore[arg-type]
    assert not QueueOptions().is_unique


def test_the_index_predicate_of_each_scope() -> None:
    assert index_predicate(UniqueScope.QUEUED) == "unique_key IS NOT NULL AND state IN (0)"
    assert index_predicate(UniqueScope.UNFINISHED) == (
        "unique_key IS NOT NULL AND state IN (0, 1, 6)"
    )
    assert index_predicate(UniqueScope.STORED) == "unique_key IS NOT NULL"


@pytest.mark.sqlite
def test_a_ring_push_with_a_key_is_refused(sqlite_path: str) -> None:
    from dbqueue.drivers.sqlite import connect

    spec = QueueSpec("ring_jobs", FIELDS[:1], QueueOptions(capacity=4))
    dialect = get_dialect("sqlite")
    ex = executor_for(dialect, connect(sqlite_path))
    ring = RingQueue(spec, dialect)
    with pytest.raises(UnsupportedOperation, match="no unique items"):
        ring.push(ex, {"order_id": 1}, unique_key="k")


@pytest.mark.postgresql
def test_pushers_of_one_key_in_open_transactions_make_one_item(
    pg_dsn: str, table_name: str
) -> None:
    """Eight pushers of one key, each in a transaction of its own (tests/races.py): no error,
    one item, every push returns it."""
    dialect = get_dialect("postgresql")
    spec = QueueSpec(table_name, FIELDS, QueueOptions(unique=("order_id",)))
    q = SplitQueue(spec, dialect)
    with psycopg.connect(pg_dsn, autocommit=True) as setup:
        ex = executor_for(dialect, setup)
        for statement in create_statements(spec, dialect):
            ex.execute(statement, {})

    def push(hold: Callable[[Pushed], None]) -> None:
        with psycopg.connect(pg_dsn) as conn:  # commits at exit
            hold(q.push(executor_for(dialect, conn), {"order_id": 42}))

    try:
        race_one_key(8, {"conninfo": pg_dsn}, spec.meta_table, push)
        with psycopg.connect(pg_dsn, autocommit=True) as check:
            row = check.execute(f'SELECT count(*) FROM "{spec.table}"').fetchone()
            assert row is not None and row[0] == 1
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f'DROP TABLE "{spec.table}", "{spec.meta_table}", "{spec.head_table}"')


def test_a_retry_through_a_spec_that_does_not_know_the_key_raises_a_clear_error(bed: Bed) -> None:
    """The command line may find a unique queue in the database without its declaration: a
    retry that would make a second item of a key is refused with UniqueKeyConflict, nothing
    retried, and the connection stays usable."""
    q, ex = bed.queue(unique=("order_id",), max_attempts=1)
    first = q.push(ex, {"order_id": 1})
    (job,) = q.pop_batch(ex, 1)
    q.fail(ex, job, "boom")
    holder = q.push(ex, {"order_id": 1})
    found = SplitQueue(QueueSpec(q.spec.table, FIELDS), q.dialect)  # no unique options
    with pytest.raises(UniqueKeyConflict, match="nothing was retried"):
        found.retry(ex, [first])
    assert keys(ex, q)[first][0] is State.FAILED
    assert q.push(ex, {"order_id": 1}) == holder


@pytest.mark.sqlite
def test_pushers_of_one_key_on_sqlite_make_one_item(sqlite_path: str) -> None:
    """SQLite's one writer at a time: pushers of one key on connections of their own, each in
    a transaction of its own, make one item, and every push returns it."""
    from dbqueue.drivers.sqlite import connect

    dialect = get_dialect("sqlite")
    spec = QueueSpec("jobs", FIELDS, QueueOptions(unique=("order_id",)))
    q = SplitQueue(spec, dialect)
    setup = executor_for(dialect, connect(sqlite_path))
    for statement in create_statements(spec, dialect):
        setup.execute(statement, {})
    results: list[Pushed] = []
    errors: list[BaseException] = []
    start = threading.Barrier(4, timeout=30)

    def push() -> None:
        try:
            ex = executor_for(dialect, connect(sqlite_path))
            start.wait()
            with ex.atomic():
                results.append(q.push(ex, {"order_id": 7}))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=push) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert len(results) == 4 and len(set(results)) == 1
    assert sum(not r.duplicate for r in results) == 1
    assert setup.execute('SELECT count(*) FROM "jobs"', {})[0][0] == 1
