"""Heads (dbqueue.upkeep.heads): a split queue's pops start each priority at its head, which
advances move up as items are taken, and never past an item that is ready or may still
become ready: a writer in flight is waited for, and what makes an item ready again with an old
due time lowers its priority's head itself. PostgreSQL only (SQLite keeps no dead versions).
"""

from __future__ import annotations

import datetime as dt
import random
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from dbqueue import Field, FieldKind, QueueSpec, SplitQueue, get_dialect
from dbqueue.drivers import executor_for
from dbqueue.drivers.psycopg import PsycopgExecutor
from dbqueue.schema import create_statements, drop_statements
from dbqueue.upkeep.heads import Heads

pytestmark = pytest.mark.postgresql

FIELDS = (Field("n", FieldKind.INTEGER),)
PG = get_dialect("postgresql")
PAST = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)


class Bed:
    """A split queue, the connection its tests run on, and one its heads advance on."""

    def __init__(self, dsn: str, table: str) -> None:
        self.dsn = dsn
        self.spec = QueueSpec(table, FIELDS)
        self.queue = SplitQueue(self.spec, PG)
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.ex = PsycopgExecutor(self.conn)
        self.upkeep = PsycopgExecutor(psycopg.connect(dsn, autocommit=True))
        self.heads = Heads()
        for statement in create_statements(self.spec, PG):
            self.conn.execute(statement)

    def advance(self, steps: int = 2) -> int:
        """Step the heads ``steps`` times (an advance takes two: the writers, then the move)."""
        return sum(self.heads.step(self.queue, self.upkeep) for _ in range(steps))

    def head_rows(self) -> dict[int, dt.datetime | None]:
        """Each priority's head (None: its start, -infinity, which Python cannot hold)."""
        rows = self.conn.execute(
            "SELECT priority, CASE WHEN isfinite(run_at) THEN run_at END "
            f'FROM "{self.spec.head_table}"'
        )
        return dict(rows.fetchall())

    def pop_ns(self, n: int = 100, **kw: Any) -> list[int]:
        return [m.payload["n"] for m in self.queue.pop_batch(self.ex, n, **kw)]

    def other(self) -> psycopg.Connection[Any]:
        """A connection of its own (not autocommit: a transaction it leaves open)."""
        return psycopg.connect(self.dsn)

    def close(self) -> None:
        for statement in drop_statements(self.spec, PG):
            self.conn.execute(statement)
        self.conn.close()
        self.upkeep.close()


@pytest.fixture
def bed(pg_dsn: str, table_name: str) -> Iterator[Bed]:
    made = Bed(pg_dsn, table_name)
    yield made
    made.close()


def test_an_advance_moves_each_head_to_its_first_ready_item(bed: Bed) -> None:
    q, ex = bed.queue, bed.ex
    q.push_many(ex, [{"n": i} for i in range(10)])
    q.push_many(ex, [{"n": 100 + i} for i in range(5)], priority=5)
    assert bed.head_rows() == {5: None}  # a priority other than 0: its row at its first push
    q.ack(ex, q.pop_batch(ex, 7))  # the five of priority 5, then two of priority 0
    assert bed.advance() == 2  # 0 gets its row, and both move
    heads = bed.head_rows()
    first_ready = q.pop_batch(ex, 1)[0]
    assert heads[0] == first_ready.run_at  # priority 0's head: its first ready item
    assert heads[5] is not None and heads[5] > first_ready.run_at  # none: at the cap
    assert bed.pop_ns() == list(range(3, 10))


def test_pops_read_what_is_ready_in_delivery_order_whatever_the_heads(bed: Bed) -> None:
    q, ex = bed.queue, bed.ex
    rng = random.Random(7)
    pushed: list[tuple[int, int]] = []
    n = 0
    for _round in range(20):
        for _ in range(rng.randrange(1, 8)):
            priority = rng.choice([0, 0, 3, -2])
            q.push(ex, {"n": n}, priority=priority)
            pushed.append((priority, n))
            n += 1
        taken = q.pop_batch(ex, rng.randrange(1, 5))
        pushed = [p for p in pushed if p[1] not in {m.payload["n"] for m in taken}]
        q.ack(ex, taken)
        bed.advance(rng.randrange(0, 3))
    expected = [k for _, k in sorted(pushed, key=lambda p: (-p[0], p[1]))]
    assert bed.pop_ns(1000) == expected


def test_a_writer_in_flight_holds_the_heads_back_until_it_ends(bed: Bed) -> None:
    """A push in a transaction left open is due from before the heads' cap, and invisible:
    the advance waits for it, so the pop finds it once it commits."""
    q, ex = bed.queue, bed.ex
    q.push_many(ex, [{"n": i} for i in range(3)])
    late = bed.other()
    q.push(executor_for(PG, late), {"n": 99})  # open, holds its lock on the meta table
    q.ack(ex, q.pop_batch(ex, 3))
    assert bed.advance(4) == 0  # it listed the writer, and waits for it
    late.commit()
    bed.advance(2)  # moves now, not past the late item (committed: visible)
    assert bed.pop_ns() == [99]
    late.close()


def test_a_push_in_the_past_lowers_its_priority_s_head(bed: Bed) -> None:
    q, ex = bed.queue, bed.ex
    q.push_many(ex, [{"n": i} for i in range(3)])
    q.ack(ex, q.pop_batch(ex, 3))
    bed.advance(4)
    assert bed.head_rows()[0] > PAST
    q.push(ex, {"n": 7}, run_at=PAST)
    assert bed.head_rows()[0] <= PAST
    assert bed.pop_ns() == [7]


def test_a_release_and_a_change_of_priority_lower_the_heads_they_need(bed: Bed) -> None:
    q, ex = bed.queue, bed.ex
    q.push_many(ex, [{"n": i} for i in range(4)])
    held = q.pop_batch(ex, 2)
    bed.advance(4)  # priority 0's head: at item 2, past the leased ones
    assert q.release(ex, held) == [m.id for m in held]  # ready again, at their old time
    assert bed.pop_ns(3) == [0, 1, 2]
    # Priority 9's head moved past item 3's due time; item 3 moves there, with its time.
    q.push(ex, {"n": 90}, priority=9)
    assert bed.pop_ns(1) == [90]
    bed.advance(4)
    (item_3,) = [int(r[0]) for r in ex.execute(f'SELECT id FROM "{bed.spec.meta_table}" '
                                               "WHERE state = 0", {})]  # fmt: skip
    assert q.set_priority(ex, [item_3], 9) == 1
    assert bed.pop_ns() == [3]


def test_an_advance_that_read_a_head_before_it_was_lowered_leaves_it(bed: Bed) -> None:
    """A lowering locks its head's row until it commits: the advance, waiting behind it,
    finds the row changed (its xmin) and leaves it, rather than set it from its older view,
    which did not see the item the lowering made ready."""
    q, ex = bed.queue, bed.ex
    q.push(ex, {"n": 1})
    q.ack(ex, q.pop_batch(ex, 1))
    bed.advance(4)  # priority 0's head at the cap; the next step lists no writer
    head = bed.head_rows()[0]
    assert head is not None and head > PAST
    lowering = bed.other()
    q.push(executor_for(PG, lowering), {"n": 2}, run_at=PAST)  # locks priority 0's row
    pending = bed.heads._pending
    assert pending is not None
    cap = pending.cap
    # The advance's statement, as a step would run it (the writer list is bypassed: this
    # races the lowering on purpose), in a thread, waits for the lowering's lock.
    moved = while_lowering(lowering, lambda: len(q._run(bed.upkeep, "head_advance", {"cap": cap})))
    assert moved == [0]
    assert bed.head_rows()[0] == PAST
    assert bed.pop_ns() == [2]
    lowering.close()


def test_an_advance_at_repeatable_read_that_meets_a_lowering_moves_nothing(bed: Bed) -> None:
    """With REPEATABLE READ as the upkeep connection's default, the advance that waited for a
    lowering's lock fails with a serialization failure instead of leaving the row: it is run
    again with a new view, which sees what the lowering made ready, and the step raises
    nothing."""
    q, ex = bed.queue, bed.ex
    bed.upkeep.connection.execute("SET default_transaction_isolation = 'repeatable read'")
    q.push(ex, {"n": 1})
    q.ack(ex, q.pop_batch(ex, 1))
    bed.advance(4)
    lowering = bed.other()
    q.push(executor_for(PG, lowering), {"n": 2}, run_at=PAST)  # locks priority 0's row
    pending = bed.heads._pending
    assert pending is not None
    bed.heads._pending = pending._replace(writers=[])  # race the lowering on purpose
    moved = while_lowering(lowering, lambda: bed.heads.step(q, bed.upkeep))
    assert moved == [0]
    assert bed.head_rows()[0] == PAST
    assert bed.pop_ns() == [2]
    lowering.close()


def test_a_priority_whose_row_is_gone_is_found_again(bed: Bed) -> None:
    q, ex = bed.queue, bed.ex
    q.push_many(ex, [{"n": i} for i in range(3)], priority=4)
    bed.conn.execute(f'DELETE FROM "{bed.spec.head_table}"')
    assert bed.pop_ns() == []  # hidden: no row, and priority 0 is not it
    bed.heads = Heads()  # a new process: it looks for missing priorities at its first step
    bed.advance(1)
    assert bed.pop_ns() == [0, 1, 2]


def test_under_a_held_horizon_the_pops_walk_no_more_than_the_last_advance_left(
    bed: Bed,
) -> None:
    """While a snapshot holds the horizon the ready index keeps an entry for every item taken:
    a pop from priority 0's start reads them all, a pop from its head only those taken since
    the last advance. Counted in index pages read (EXPLAIN BUFFERS), not in time."""
    q, ex = bed.queue, bed.ex
    holder = psycopg.connect(bed.dsn, autocommit=True)
    holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    holder.execute("SELECT count(*) FROM pg_class")
    try:
        for start in range(0, 20_000, 500):
            q.push_many(ex, [{"n": start + i} for i in range(500)])
            q.ack(ex, q.pop_batch(ex, 500))
        q.push(ex, {"n": -1})

        def pages_read() -> int:
            with bed.conn.transaction(force_rollback=True):
                plan = bed.conn.execute(
                    "EXPLAIN (ANALYZE, BUFFERS, FORMAT TEXT) "
                    + q.statements["split_pop_leased"].parts[0],
                    {"n": 1, "lease": dt.timedelta(seconds=30), "commit": None},
                ).fetchall()
            text = "\n".join(r[0] for r in plan)
            return int(re.search(r"Buffers: shared hit=(\d+)", text).group(1))  # type: ignore[union-attr]

        from_start = pages_read()
        bed.advance(2)
        from_head = pages_read()
        assert from_head * 10 < from_start, (from_head, from_start)
    finally:
        holder.close()
    assert bed.pop_ns() == [-1]


def while_lowering(lowering: Any, advance: Callable[[], int]) -> list[int]:
    """Run ``advance`` in a thread, where it waits for the lock ``lowering`` (a connection whose
    transaction lowered a head) holds; commit the lowering; what ``advance`` returned."""
    moved: list[int] = []
    thread = threading.Thread(target=lambda: moved.append(advance()))
    thread.start()
    thread.join(0.5)
    lowering.commit()
    thread.join()
    return moved
