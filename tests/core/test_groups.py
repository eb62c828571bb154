"""Consumer groups (fan-out) of split queues in the core, on PostgreSQL and SQLite: one push
delivered once to every group, each group's own leases, attempts, retries, failed items and
errors, the data row removed with the last group's meta row (also when groups remove their
rows at the same moment, PostgreSQL), adding and removing a group, and the refusals."""

from __future__ import annotations

import datetime as dt
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from dbqueue import (
    Field,
    FieldKind,
    InvalidArgument,
    InvalidSpec,
    QueueOptions,
    QueueSpec,
    SplitQueue,
    State,
    UnsupportedOperation,
    get_dialect,
)
from dbqueue.drivers import executor_for
from dbqueue.executor import Executor
from dbqueue.schema import create_statements, group_statements
from dbqueue.spec import MAX_GROUPS, options_from
from tests.core.backends import BACKENDS, connect
from tests.core.upkeep.support import compacted

FIELDS = (Field("n", FieldKind.INTEGER), Field("note", FieldKind.TEXT, nullable=True))
GROUPS = ("email", "search", "audit")


@dataclass
class Bed:
    """A queue with consumer groups on one connection, and how to look into its tables."""

    backend: str
    conn: Any
    queue: SplitQueue
    ex: Executor

    def group(self, name: str) -> SplitQueue:
        return self.queue.group(name)

    def data_ids(self) -> list[int]:
        """The ids whose payload is still stored."""
        rows = self.ex.execute(f'SELECT id FROM "{self.queue.spec.table}" ORDER BY id', {})
        return [int(r[0]) for r in rows]

    def rows(self, group: str) -> dict[int, tuple[State, int, str | None]]:
        """A group's meta rows: state, attempts and last error, by id."""
        table = self.queue.spec.for_group(group).meta_table
        rows = self.ex.execute(f'SELECT id, state, attempts, last_error FROM "{table}"', {})
        return {int(i): (State(s), int(a), e) for i, s, a, e in rows}


def make_bed(backend: str, conn: Any, table: str, **options: Any) -> Bed:
    dialect = get_dialect(backend)
    spec = QueueSpec(table, FIELDS, QueueOptions(**{"groups": GROUPS, **options}))
    ex = executor_for(dialect, conn)
    for statement in create_statements(spec, dialect):
        ex.execute(statement, {})
    return Bed(backend, conn, SplitQueue(spec, dialect), ex)


def drop(conn: Any, spec: QueueSpec) -> None:
    tables = ", ".join(f'"{t}"' for t in (spec.table, *spec.group_meta_tables))
    conn.execute(f"DROP TABLE IF EXISTS {tables}")


@pytest.fixture(params=BACKENDS)
def backend_conn(request: pytest.FixtureRequest) -> Iterator[tuple[str, Any]]:
    backend = request.param
    conn = connect(request, backend)
    yield backend, conn
    conn.close()


@pytest.fixture
def bed(backend_conn: tuple[str, Any], table_name: str) -> Iterator[Bed]:
    backend, conn = backend_conn
    made = make_bed(backend, conn, table_name)
    yield made
    if not isinstance(conn, sqlite3.Connection):
        drop(conn, made.queue.spec)


# -- delivery -------------------------------------------------------------------------------


def test_a_push_is_delivered_once_to_every_group(bed: Bed) -> None:
    first = bed.queue.push(bed.ex, {"n": 1})
    rest = bed.queue.push_many(bed.ex, [{"n": 2}, {"n": 3, "note": "x"}])
    ids = [first, *rest]
    for name in GROUPS:
        popped = bed.group(name).pop_batch(bed.ex, 10)
        assert [m.id for m in popped] == ids, name
        assert [m.payload["n"] for m in popped] == [1, 2, 3]
        assert popped[2].payload["note"] == "x"
        assert bed.group(name).pop_batch(bed.ex, 10) == [], "delivered once per group"
    # The payload is stored once; every group has a meta row of each item.
    assert bed.data_ids() == ids
    assert all(set(bed.rows(g)) == set(ids) for g in GROUPS)


def test_the_payload_goes_with_the_last_group_to_finish(bed: Bed) -> None:
    item = bed.queue.push(bed.ex, {"n": 1})
    email, search, audit = (bed.group(g) for g in GROUPS)
    assert email.ack(bed.ex, email.pop_batch(bed.ex, 1)) == [item]
    assert bed.data_ids() == [item]
    assert search.pop_batch(bed.ex, 1, mode="at_most_once")[0].id == item
    assert bed.data_ids() == [item]
    with bed.ex.atomic():
        assert audit.pop_batch(bed.ex, 1, mode="transactional")[0].id == item
    assert bed.data_ids() == []
    assert all(bed.rows(g) == {} for g in GROUPS)


def test_each_group_has_its_own_attempts_retries_and_errors(bed: Bed) -> None:
    item = bed.queue.push(bed.ex, {"n": 1})
    email, search = bed.group("email"), bed.group("search")
    assert email.fail(bed.ex, email.pop_batch(bed.ex, 1), "smtp down", retry=False) == {
        item: State.FAILED
    }
    popped = search.pop_batch(bed.ex, 1)
    assert popped[0].last_error is None, "another group's error is not this group's"
    assert search.fail(bed.ex, popped, "index busy", delay=dt.timedelta(0)) == {item: State.READY}
    assert bed.rows("email")[item] == (State.FAILED, 1, "smtp down")
    assert bed.rows("search")[item] == (State.READY, 1, "index busy")
    assert bed.rows("audit")[item] == (State.READY, 0, None)
    again = search.pop_batch(bed.ex, 1)
    assert again[0].attempts == 2 and again[0].last_error == "index busy"
    assert email.stats(bed.ex).failed == 1 and search.stats(bed.ex).leased == 1
    assert bed.group("audit").stats(bed.ex).ready == 1
    # A retry brings back the group's own failed item only.
    assert email.retry(bed.ex, [item]) == 1
    assert email.pop_batch(bed.ex, 1)[0].attempts == 1


def test_expired_leases_are_rescued_per_group(bed: Bed) -> None:
    item = bed.queue.push(bed.ex, {"n": 1})
    email = bed.group("email")
    email.pop_batch(bed.ex, 1, lease=dt.timedelta(milliseconds=1))
    bed.group("search").pop_batch(bed.ex, 1)
    threading.Event().wait(0.05)
    assert email.rescue(bed.ex).ready == 1
    assert bed.group("search").rescue(bed.ex).ready == 0
    state, attempts, error = bed.rows("email")[item]
    assert (state, attempts) == (State.READY, 1) and error and "lease expired" in error
    assert bed.rows("search")[item][0] is State.LEASED
    assert email.next_due(bed.ex) is not None


def test_ack_pop_purge_count_and_cancel_act_on_one_group(bed: Bed) -> None:
    ids = bed.queue.push_many(bed.ex, [{"n": i} for i in range(4)])
    email, search = bed.group("email"), bed.group("search")
    first = email.pop_batch(bed.ex, 2)
    acked, more = email.ack_pop(bed.ex, first, 2)
    assert acked == 2 and [m.id for m in more] == ids[2:]
    assert search.count(bed.ex, "ready") == 4
    assert search.cancel(bed.ex, [ids[0]])[ids[0]].name == "CANCELLED"
    assert bed.rows("email")[ids[2]][0] is State.LEASED
    assert search.purge(bed.ex, "ready") == 3
    assert bed.group("audit").purge(bed.ex) == 4
    # email still holds its two leased items; search its cancelled one.
    assert bed.data_ids() == [ids[0], ids[2], ids[3]]
    assert email.ack(bed.ex, more) == ids[2:]
    assert search.purge(bed.ex, "cancelled") == 1
    assert bed.data_ids() == []


def test_delete_through_the_queue_removes_the_item_from_every_group(bed: Bed) -> None:
    keep, gone = bed.queue.push_many(bed.ex, [{"n": 1}, {"n": 2}])
    bed.group("email").pop_batch(bed.ex, 2)
    assert bed.queue.delete(bed.ex, [gone, 999]) == 1
    assert bed.data_ids() == [keep]
    assert all(set(bed.rows(g)) == {keep} for g in GROUPS)
    # A group's delete removes its own delivery; the item stays for the others.
    assert bed.group("search").delete(bed.ex, [keep]) == 1
    assert bed.data_ids() == [keep]
    assert bed.queue.delete(bed.ex, []) == 0


def test_keep_done_keeps_each_groups_done_rows(
    backend_conn: tuple[str, Any], table_name: str
) -> None:
    backend, conn = backend_conn
    made = make_bed(backend, conn, table_name, keep_done=True)
    try:
        item = made.queue.push(made.ex, {"n": 1})
        for name in GROUPS:
            group = made.group(name)
            assert group.ack(made.ex, group.pop_batch(made.ex, 1)) == [item]
        assert all(made.rows(g)[item][0] is State.DONE for g in GROUPS)
        assert made.data_ids() == [item]
        for name in GROUPS:
            assert made.group(name).purge(made.ex, "done") == 1
        assert made.data_ids() == []
    finally:
        if backend == "postgresql":
            drop(conn, made.queue.spec)


# -- groups added and removed ---------------------------------------------------------------


def test_a_group_added_later_receives_the_items_pushed_from_then_on(
    backend_conn: tuple[str, Any], table_name: str
) -> None:
    backend, conn = backend_conn
    made = make_bed(backend, conn, table_name)
    dialect = get_dialect(backend)
    wider = QueueSpec(table_name, FIELDS, QueueOptions(groups=(*GROUPS, "billing")))
    try:
        before = made.queue.push(made.ex, {"n": 1})
        for statement in group_statements(wider.for_group("billing"), dialect):
            made.ex.execute(statement, {})
        queue = SplitQueue(wider, dialect)
        after = queue.push(made.ex, {"n": 2})
        assert [m.id for m in queue.group("billing").pop_batch(made.ex, 5)] == [after]
        assert [m.id for m in queue.group("email").pop_batch(made.ex, 5)] == [before, after]
        # The item pushed before billing existed goes once the old groups are done with it.
        for name in GROUPS:
            queue.group(name).purge(made.ex)
        assert made.data_ids() == [after]
        # Removing a group: its table dropped, a queue that no longer names it.
        made.ex.execute(f'DROP TABLE "{wider.for_group("billing").meta_table}"', {})
        assert made.queue.push(made.ex, {"n": 3}) > after
        assert made.queue.group("email").purge(made.ex) == 1
    finally:
        if backend == "postgresql":
            drop(conn, wider)


# -- refusals -------------------------------------------------------------------------------


def test_the_queue_itself_pushes_and_a_group_does_not(bed: Bed) -> None:
    with pytest.raises(UnsupportedOperation, match=r"queue.group\(name\)"):
        bed.queue.pop_batch(bed.ex, 1)
    with pytest.raises(UnsupportedOperation, match="email, search, audit"):
        bed.queue.stats(bed.ex)
    with pytest.raises(UnsupportedOperation, match="push to the queue"):
        bed.group("email").push(bed.ex, {"n": 1})
    with pytest.raises(UnsupportedOperation, match="push to the queue"):
        bed.group("email").push_many(bed.ex, [{"n": 1}])
    with pytest.raises(InvalidArgument, match="no consumer group 'billing'; its groups: email"):
        bed.queue.group("billing")
    # Nothing was written, and the connection is usable.
    assert bed.data_ids() == []
    assert bed.queue.pushed(bed.ex) == 0
    assert bed.group("email") is bed.group("email")


def test_a_queue_without_groups_has_none_to_give() -> None:
    queue = SplitQueue(QueueSpec("plain_q", FIELDS), get_dialect("sqlite"))
    with pytest.raises(InvalidArgument, match="has no consumer groups"):
        queue.group("email")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"groups": ("email", "email")}, "names a group twice"),
        ({"groups": ("Email",)}, "not a valid identifier"),
        ({"groups": ("a-b",)}, "not a valid identifier"),
        ({"groups": (1,)}, "tuple of group names"),
        ({"groups": tuple(f"g{i}" for i in range(MAX_GROUPS + 1))}, f"at most {MAX_GROUPS}"),
        ({"groups": ("email",), "unique": ("n",)}, "cannot be combined"),
        ({"groups": ("email",), "unique_scope": "queued"}, "cannot be combined"),
    ],
)
def test_bad_group_declarations_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidSpec, match=message):
        QueueSpec("orders", FIELDS, QueueOptions(**options))


def test_a_group_name_must_leave_room_for_its_table_name() -> None:
    table = "t" * 40
    QueueSpec(table, FIELDS, QueueOptions(groups=("g" * 17,)))  # 40 + 6 + 17 = 63 bytes
    with pytest.raises(InvalidSpec, match="18 bytes long; at most 17"):
        QueueSpec(table, FIELDS, QueueOptions(groups=("g" * 18,)))


def test_a_group_spec_names_its_own_tables_indexes_and_lock() -> None:
    spec = QueueSpec("orders", FIELDS, QueueOptions(groups=["email", "search"]))
    assert spec.options.groups == ("email", "search") and spec.fans_out
    email = spec.for_group("email")
    assert email.meta_table == "orders_meta_email" and not email.fans_out
    assert spec.group_meta_tables == ("orders_meta_email", "orders_meta_search")
    names = {email.index_name("ready"), spec.for_group("search").index_name("ready")}
    assert len(names) == 2 and all(len(n) <= 30 for n in names)
    assert email.lock_key != spec.lock_key != spec.for_group("search").lock_key
    with pytest.raises(InvalidSpec, match="no consumer group"):
        QueueSpec("orders", FIELDS, spec.options, group="billing")
    with pytest.raises(InvalidSpec, match="takes a consumer group's spec"):
        group_statements(spec, get_dialect("sqlite"))


def test_a_declaration_passes_groups_through() -> None:
    options = options_from(
        {"groups": ("email",)}, label="Orders", ring=False, aware_datetimes=True, ring_hint=""
    )
    assert options.groups == ("email",)
    ring = options_from(
        {"groups": ("email",), "capacity": 4},
        label="Orders",
        ring=True,
        aware_datetimes=True,
        ring_hint="",
    )
    assert ring.groups == ("email",)


# -- groups removing their rows of one item at the same moment (PostgreSQL) ----------------


def _remove_together(dsn: str, bed: Bed, how: str, rounds: int) -> None:
    """For each round, every group removes its row of the round's items at the same moment
    (a barrier), on connections of their own, by ``how``."""
    dialect = get_dialect("postgresql")
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(GROUPS))
    ids_by_round = [bed.queue.push_many(bed.ex, [{"n": r}, {"n": r}]) for r in range(rounds)]

    def run(name: str) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                ex = executor_for(dialect, conn)
                group = bed.queue.group(name)
                for ids in ids_by_round:
                    popped = group.pop_batch(ex, 2) if how == "ack" else []
                    barrier.wait(30)
                    if how == "ack":
                        assert sorted(group.ack(ex, popped)) == sorted(ids)
                    elif how == "at_most_once":
                        assert len(group.pop_batch(ex, 2, mode="at_most_once")) == 2
                    else:
                        assert group.delete(ex, ids) == 2
        except BaseException as exc:  # reported below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(g,)) for g in GROUPS]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert bed.data_ids() == [], "a data row outlived every group's meta row"


@pytest.mark.postgresql
@pytest.mark.parametrize("how", ["ack", "at_most_once", "delete"])
def test_groups_removing_one_item_at_once_leave_no_payload_behind(
    pg_dsn: str, table_name: str, how: str
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        made = make_bed("postgresql", conn, table_name)
        try:
            _remove_together(pg_dsn, made, how, rounds=30)
        finally:
            drop(conn, made.queue.spec)


@pytest.mark.postgresql
def test_compacting_a_group_keeps_every_groups_items(pg_dsn: str, table_name: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        made = make_bed("postgresql", conn, table_name)
        try:
            ids = made.queue.push_many(made.ex, [{"n": i} for i in range(3)])
            email = made.group("email")
            email.ack(made.ex, email.pop_batch(made.ex, 1))
            assert compacted(email, made.ex).compacted
            assert made.data_ids() == ids
            assert set(made.rows("email")) == set(ids[1:])
            assert [m.id for m in made.group("search").pop_batch(made.ex, 5)] == ids
        finally:
            drop(conn, made.queue.spec)


def test_a_groups_worker_pushes_schedule_ticks_to_every_group(bed: Bed) -> None:
    from dbqueue.worker_queue import ExecutorQueue

    worker_queue = ExecutorQueue(bed.group("search"), lambda: bed.ex)
    pushed = worker_queue.push_if_claimed(lambda ex: True, lambda: {"n": 7})
    assert pushed is not None and worker_queue.name == bed.queue.spec.table
    assert all(set(bed.rows(g)) == {pushed} for g in GROUPS)
    assert worker_queue.push_if_claimed(lambda ex: False, lambda: {"n": 8}) is None
    assert bed.data_ids() == [pushed]
