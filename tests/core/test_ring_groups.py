"""Consumer groups (fan-out) of ring queues in the core, on PostgreSQL and SQLite: one push
delivered once to every group through its own state table, a slot reused only once every group
has settled it, a lagging group named in QueueFull, each group's own leases, retries, failed
messages, rescues and releases, spilled messages returned to every group, a copy a consumer
holds moved aside by a pusher, holes, adding a group, concurrent pushers and consumers
(PostgreSQL), and the refusals."""

from __future__ import annotations

import datetime as dt
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from dbqueue import (
    Field,
    FieldKind,
    QueueFull,
    QueueOptions,
    QueueSpec,
    RingQueue,
    State,
    UnsupportedOperation,
    get_dialect,
)
from dbqueue.drivers import executor_for
from dbqueue.executor import Executor
from dbqueue.ring import SlotState
from dbqueue.ring.claims import Claim
from dbqueue.ring.states import SideState
from dbqueue.schema import create_ring_statements, drop_ring_statements, group_statements
from tests.core.backends import BACKENDS, connect
from tests.core.upkeep.support import compacted

FIELDS = (Field("n", FieldKind.INTEGER), Field("note", FieldKind.TEXT, nullable=True))
GROUPS = ("email", "search", "audit")
OPTIONS = {
    "capacity": 4,
    "groups": GROUPS,
    "push_timeout": dt.timedelta(milliseconds=100),
    "hole_timeout": dt.timedelta(0),
    "stranded_after": dt.timedelta(0),
    "max_attempts": 3,
}


@dataclass
class Bed:
    """A ring with consumer groups on one connection, and how to look into its tables."""

    backend: str
    conn: Any
    queue: RingQueue
    ex: Executor

    def group(self, name: str) -> RingQueue:
        return self.queue.group(name)

    def rows(self, group: str) -> dict[int, tuple[int, SlotState]]:
        """A group's state rows: the number each slot last held for it, and its state."""
        table = self.queue.spec.for_group(group).state_table
        rows = self.ex.execute(f'SELECT slot, seq, state FROM "{table}"', {})
        return {int(s): (int(q), SlotState(st)) for s, q, st in rows}

    def side(self, group: str | None) -> dict[int, SideState]:
        """A group's side table (the queue's own with None): state by number."""
        spec = self.queue.spec if group is None else self.queue.spec.for_group(group)
        rows = self.ex.execute(f'SELECT id, state FROM "{spec.failed_table}"', {})
        return {int(i): SideState(s) for i, s in rows}


def make_bed(backend: str, conn: Any, table: str, **options: Any) -> Bed:
    dialect = get_dialect(backend)
    declared = {**OPTIONS, **options}
    if declared.get("when_full", "wait") != "wait":
        del declared["push_timeout"]  # a push that does not wait has none
    spec = QueueSpec(table, FIELDS, QueueOptions(**declared))
    ex = executor_for(dialect, conn)
    for statement in create_ring_statements(spec, dialect):
        ex.execute(statement, {})
    return Bed(backend, conn, RingQueue(spec, dialect), ex)


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
        for statement in drop_ring_statements(made.queue.spec, made.queue.dialect):
            conn.execute(statement)


def drain(queue: RingQueue, ex: Executor) -> list[int]:
    """Pop and ack everything the group has now; the numbers, in order."""
    taken = queue.pop_batch(ex, 100)
    queue.ack(ex, taken)
    return [m.id for m in taken]


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
        assert bed.group(name).ack(bed.ex, popped) == ids


def test_every_delivery_mode_of_a_group(bed: Bed) -> None:
    item = bed.queue.push(bed.ex, {"n": 7})
    email, search, audit = (bed.group(g) for g in GROUPS)
    assert [m.id for m in email.pop_batch(bed.ex, 1, mode="at_most_once")] == [item]
    with bed.ex.atomic():
        assert [m.payload["n"] for m in search.pop_batch(bed.ex, 1, mode="transactional")] == [7]
    leased = audit.pop_batch(bed.ex, 1)
    assert audit.ack_pop(bed.ex, leased, 1)[1] == []
    assert all(state is SlotState.EMPTY for _, state in bed.rows("audit").values())


def test_a_slot_is_reused_only_once_every_group_settled_it(bed: Bed) -> None:
    ids = bed.queue.push_many(bed.ex, [{"n": i} for i in range(4)])  # the ring is full
    for name in ("email", "search"):
        assert drain(bed.group(name), bed.ex) == ids
    with pytest.raises(QueueFull) as full:
        bed.queue.push(bed.ex, {"n": 4})
    # The group that holds the slot is named, with how far behind the pushers it is.
    assert full.value.lagging is not None and full.value.lagging.startswith("audit (")
    assert "email" not in str(full.value) and "audit (" in str(full.value)
    assert drain(bed.group("audit"), bed.ex)[:1] == ids[:1]
    bed.queue.push(bed.ex, {"n": 4})
    for name in GROUPS:
        assert [m.payload["n"] for m in bed.group(name).pop_batch(bed.ex, 5)] == [4]


def test_a_stopped_group_delays_no_other_group_within_capacity(bed: Bed) -> None:
    email = bed.group("email")
    for n in range(3):
        bed.queue.push(bed.ex, {"n": n})
        taken = email.pop_batch(bed.ex, 5)
        assert [m.payload["n"] for m in taken] == [n]
        email.ack(bed.ex, taken)
    assert bed.group("audit").stats(bed.ex).ready == 3
    assert email.stats(bed.ex).ready == 0


# -- each group's own leases, failures and retries -------------------------------------------


def test_each_group_has_its_own_attempts_failures_and_retries(bed: Bed) -> None:
    item = bed.queue.push(bed.ex, {"n": 1, "note": "hello"})
    email, search = bed.group("email"), bed.group("search")
    assert email.fail(bed.ex, email.pop_batch(bed.ex, 1), "smtp down", retry=False) == {
        item: State.FAILED
    }
    assert bed.side("email") == {item: SideState.FAILED}
    assert bed.side("search") == {}
    # The failed copy keeps its payload, whatever later laps write into the slot.
    [popped] = search.pop_batch(bed.ex, 1)
    assert popped.attempts == 1 and search.ack(bed.ex, [popped]) == [item]
    for name in ("search", "audit"):
        drain(bed.group(name), bed.ex)
    assert email.stats(bed.ex).failed == 1 and search.stats(bed.ex).failed == 0
    # A retry goes back into the ring for that group only.
    assert email.retry(bed.ex, [item]) == 1
    [again] = email.pop_batch(bed.ex, 1)
    assert again.payload == {"n": 1, "note": "hello"} and again.id != item
    assert search.pop_batch(bed.ex, 1) == [] and bed.group("audit").pop_batch(bed.ex, 1) == []
    assert email.ack(bed.ex, [again]) == [again.id]


def test_a_group_rescues_and_releases_its_own_leases(bed: Bed) -> None:
    item = bed.queue.push(bed.ex, {"n": 1})
    email, search = bed.group("email"), bed.group("search")
    email.pop_batch(bed.ex, 1, lease=dt.timedelta(milliseconds=1))
    held = search.pop_batch(bed.ex, 1)
    time.sleep(0.01)
    assert search.rescue(bed.ex).ready == 0, "a group's sweeper sweeps its own leases"
    result = email.rescue(bed.ex)
    assert (result.ready, result.returned) == (1, 1)
    [again] = email.pop_batch(bed.ex, 1)
    assert again.payload["n"] == 1 and again.attempts == 2
    assert "lease expired" in (again.last_error or "")
    assert search.release(bed.ex, held) == [item]
    [back] = search.pop_batch(bed.ex, 1)
    assert back.payload["n"] == 1 and back.attempts == 1, "the release took its attempt back"
    assert bed.group("audit").pop_batch(bed.ex, 5)[0].id == item


def test_a_pusher_moves_a_held_copy_aside(bed: Bed) -> None:
    ids = bed.queue.push_many(bed.ex, [{"n": i} for i in range(4)])
    search = bed.group("search")
    for name in ("email", "audit"):
        drain(bed.group(name), bed.ex)
    held = search.pop_batch(bed.ex, 1)  # search holds the first slot's message
    drain(search, bed.ex)
    bed.queue.push(bed.ex, {"n": 4})  # outside a transaction: moves search's lease aside
    assert bed.side("search") == {ids[0]: SideState.LEASED}
    assert search.ack(bed.ex, held) == [ids[0]]
    assert bed.side("search") == {}
    assert [m.payload["n"] for m in search.pop_batch(bed.ex, 5)] == [4]


# -- spilling, deleting, stats -----------------------------------------------------------------


def test_spilled_messages_reach_every_group(backend_conn: tuple[str, Any], table_name: str) -> None:
    backend, conn = backend_conn
    bed = make_bed(backend, conn, table_name, when_full="spill")
    ids = bed.queue.push_many(bed.ex, [{"n": i} for i in range(6)])
    assert len(bed.side(None)) == 2, "two spilled into the queue's own side table"
    for name in GROUPS:
        assert drain(bed.group(name), bed.ex) == ids[:4], name
    # Once every group has settled their slots, the spilled ones go into the ring for all.
    for name in GROUPS:
        assert len(drain(bed.group(name), bed.ex)) == 2, name
    assert bed.side(None) == {}
    if not isinstance(conn, sqlite3.Connection):
        for statement in drop_ring_statements(bed.queue.spec, bed.queue.dialect):
            conn.execute(statement)


def test_delete_removes_a_message_from_every_group(bed: Bed) -> None:
    keep, gone = bed.queue.push_many(bed.ex, [{"n": 1}, {"n": 2}])
    bed.group("email").pop_batch(bed.ex, 2)
    assert bed.queue.delete(bed.ex, [gone]) == 1
    assert [m.id for m in bed.group("search").pop_batch(bed.ex, 5)] == [keep]
    assert bed.group("audit").delete(bed.ex, [keep]) == 1
    assert bed.group("audit").pop_batch(bed.ex, 5) == []
    assert bed.group("search").count(bed.ex) == 1  # leased, its own


def test_stats_are_per_group(bed: Bed) -> None:
    bed.queue.push_many(bed.ex, [{"n": 1}, {"n": 2}])
    bed.group("email").pop_batch(bed.ex, 1)
    email = bed.group("email").stats(bed.ex)
    assert (email.ready, email.leased, email.capacity) == (1, 1, 4)
    assert bed.group("search").stats(bed.ex).ready == 2
    bed.queue.check(bed.ex)
    assert bed.queue.pushed(bed.ex) == 2


# -- holes, adding a group ---------------------------------------------------------------------


@pytest.mark.postgresql
def test_a_rolled_back_push_leaves_a_hole_every_group_skips(pg_dsn: str, table_name: str) -> None:
    conn = psycopg.connect(pg_dsn, autocommit=True)
    bed = make_bed("postgresql", conn, table_name)
    with pytest.raises(ZeroDivisionError), bed.ex.atomic():
        bed.queue.push(bed.ex, {"n": 0})
        raise ZeroDivisionError
    after = bed.queue.push(bed.ex, {"n": 1})
    for name in GROUPS:
        group = bed.group(name)
        taken = group.pop_batch(bed.ex, 5)
        assert [m.id for m in taken] == [after], name
        group.ack(bed.ex, taken)
    # The hole's slot serves the next lap in every group.
    later = bed.queue.push_many(bed.ex, [{"n": n} for n in range(4)])
    for name in GROUPS:
        assert [m.id for m in bed.group(name).pop_batch(bed.ex, 5)] == later, name
    for statement in drop_ring_statements(bed.queue.spec, bed.queue.dialect):
        conn.execute(statement)
    conn.close()


def test_an_added_group_receives_what_is_pushed_from_then_on(
    backend_conn: tuple[str, Any], table_name: str
) -> None:
    backend, conn = backend_conn
    bed = make_bed(backend, conn, table_name, groups=("email",))
    old = bed.queue.push(bed.ex, {"n": 1})
    wider = QueueSpec(table_name, FIELDS, QueueOptions(**{**OPTIONS, "groups": ("email", "new")}))
    with bed.ex.atomic():
        for statement in group_statements(wider.for_group("new"), bed.queue.dialect):
            bed.ex.execute(statement, {})
    queue = RingQueue(wider, bed.queue.dialect)
    new = queue.push(bed.ex, {"n": 2})
    assert [m.id for m in queue.group("new").pop_batch(bed.ex, 5)] == [new]
    assert [m.id for m in queue.group("email").pop_batch(bed.ex, 5)] == [old, new]
    if not isinstance(conn, sqlite3.Connection):
        for statement in drop_ring_statements(wider, bed.queue.dialect):
            conn.execute(statement)


# -- refusals ----------------------------------------------------------------------------------


def test_the_queue_pushes_and_its_groups_pop(bed: Bed) -> None:
    with pytest.raises(UnsupportedOperation, match=r"queue\.group"):
        bed.queue.pop_batch(bed.ex, 1)
    with pytest.raises(UnsupportedOperation, match=r"queue\.group"):
        bed.queue.stats(bed.ex)
    with pytest.raises(UnsupportedOperation, match="does not push"):
        bed.group("email").push(bed.ex, {"n": 1})
    with pytest.raises(UnsupportedOperation, match="does not push"):
        bed.group("email").push_many(bed.ex, [{"n": 1}])
    assert bed.group("email").pushing_queue() is bed.queue
    if bed.backend == "postgresql":
        # A group's compaction rewrites its state rows, its side table and the slots that
        # hold the payloads, every message kept (dbqueue.upkeep.compaction).
        ids = bed.queue.push_many(bed.ex, [{"n": i} for i in range(3)])
        email = bed.group("email")
        assert compacted(email, bed.ex).compacted
        assert [m.id for m in email.pop_batch(bed.ex, 5)] == ids
        assert [m.payload["n"] for m in bed.group("audit").pop_batch(bed.ex, 5)] == [0, 1, 2]


# -- concurrency (PostgreSQL) ------------------------------------------------------------------


@pytest.mark.postgresql
def test_a_pop_that_waited_for_a_pusher_takes_the_new_message_with_its_payload(
    pg_dsn: str, table_name: str
) -> None:
    """A popper holding claims 0 and 4 (capacity 4) finds slot 0 holding 0, ready, while a
    pusher of 4 moves 0 aside and writes 4 there. The popper's UPDATE waits for the pusher's row
    lock and PostgreSQL re-checks it on the row as the pusher left it, with the slot table's row
    as its snapshot saw it: a pop that joined the payload by slot alone took 4 with 0's
    payload (the concurrency test lost a message this way). The join also matches the number,
    so the pop takes nothing then, and 4 comes later with its own payload."""
    conn = psycopg.connect(pg_dsn, autocommit=True)
    bed = make_bed("postgresql", conn, table_name)
    spec = bed.queue.spec
    email = bed.group("email")
    bed.queue.push(bed.ex, {"n": 0})
    for name in ("search", "audit"):
        drain(bed.group(name), bed.ex)
    # Pushers took numbers 1 to 4; email claimed 0 and 4 and took neither yet.
    for seq in (spec.push_seq, spec.for_group("email").pop_seq):
        conn.execute(f"SELECT setval('\"{seq}\"', 4)")
    email._claims.give_back([Claim(0, time.monotonic()), Claim(4, time.monotonic())])
    pusher = psycopg.connect(pg_dsn)
    # What ring_push_blocked writes for 4 once every group gave up slot 0 (email's copy is
    # moved aside; left out here), left uncommitted while the popper comes.
    for group in spec.group_specs:
        pusher.execute(
            f'UPDATE "{group.state_table}" SET seq = 4, state = %s, attempts = 0, '
            "pushed_at = statement_timestamp() WHERE slot = 0",
            [SlotState.READY],
        )
    pusher.execute(f'UPDATE "{spec.table}" SET seq = 4, n = 4 WHERE slot = 0')
    popped: list[Any] = []
    popper = psycopg.connect(pg_dsn, autocommit=True)
    pop = threading.Thread(
        target=lambda: popped.extend(email.pop_batch(executor_for(bed.queue.dialect, popper), 5))
    )
    pop.start()
    for _ in range(3000):  # at most 30 s: the popper is starting
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'",
            [popper.info.backend_pid],
        ).fetchone()
        if row and row[0]:
            break
        time.sleep(0.01)
    else:
        pytest.fail("the popper never waited for the pusher's row")
    pusher.commit()
    pop.join(30)
    assert popped == [], "the re-check failed: 0's slot row no longer joins 4's row"
    # With hole_timeout 0 the popper dropped its claims; 4 is stranded and the sweeper puts it
    # aside and pushes it again, under a new number, with its own payload.
    email.rescue(bed.ex)
    assert [m.payload["n"] for m in email.pop_batch(bed.ex, 5)] == [4]
    for name in ("search", "audit"):
        assert [(m.id, m.payload["n"]) for m in bed.group(name).pop_batch(bed.ex, 5)] == [(4, 4)]
    for c in (pusher, popper):
        c.close()
    for statement in drop_ring_statements(spec, bed.queue.dialect):
        conn.execute(statement)
    conn.close()


@pytest.mark.postgresql
def test_concurrent_pushers_and_consumers_deliver_each_message_once_per_group(
    pg_dsn: str, table_name: str
) -> None:
    """Two pushers and a consumer per group, on their own connections, through a ring much
    smaller than the traffic (every slot reused many times, pushers waiting on the slowest
    group, moving copies aside): each group gets every message exactly once."""
    conn = psycopg.connect(pg_dsn, autocommit=True)
    bed = make_bed(
        "postgresql", conn, table_name, capacity=8, when_full="wait",
        push_timeout=dt.timedelta(seconds=30),
    )  # fmt: skip
    per_pusher, pushers = 150, 2
    pushed: list[int] = []
    got: dict[str, list[tuple[int, int]]] = {g: [] for g in GROUPS}
    errors: list[BaseException] = []

    def push(k: int) -> None:
        try:
            with psycopg.connect(pg_dsn, autocommit=True) as c:
                ex = executor_for(bed.queue.dialect, c)
                for i in range(per_pusher):
                    pushed.append(bed.queue.push(ex, {"n": k * 1000 + i}))
        except BaseException as exc:
            errors.append(exc)

    def consume(name: str) -> None:
        try:
            with psycopg.connect(pg_dsn, autocommit=True) as c:
                ex = executor_for(bed.queue.dialect, c)
                group = RingQueue(bed.queue.spec, bed.queue.dialect).group(name)
                deadline = time.monotonic() + 60
                while len(got[name]) < per_pusher * pushers and time.monotonic() < deadline:
                    taken = group.pop_batch(ex, 5)
                    got[name].extend((m.id, m.payload["n"]) for m in taken)
                    group.ack(ex, taken)
                    if not taken:
                        # As a worker's maintenance does: strands (claims its pops gave up
                        # on, hole_timeout being 0 here) put aside and pushed again.
                        group.rescue(ex)
                        time.sleep(0.001)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=push, args=(k,)) for k in range(pushers)]
    threads += [threading.Thread(target=consume, args=(g,)) for g in GROUPS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(set(pushed)) == per_pusher * pushers
    for name in GROUPS:
        # By payload: a message a pusher moved aside comes back under a new number.
        assert sorted(n for _, n in got[name]) == sorted(
            k * 1000 + i for k in range(pushers) for i in range(per_pusher)
        ), name
    for statement in drop_ring_statements(bed.queue.spec, bed.queue.dialect):
        conn.execute(statement)
    conn.close()
