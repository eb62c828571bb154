"""The ring's hot statements reach their slots by primary key on PostgreSQL, whatever the
capacity: no push, pop, ack, fail or extend may scan the slot table. A structural check on the
planner's choice (EXPLAIN, never a timer): a join over the claims once planned as a hash join
over every slot and made each pop cost O(capacity)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.core.plans import ExplainingExecutor, WorkCountingExecutor
from tests.core.ringbed import RingBed, ring_bed

pytestmark = pytest.mark.postgresql

CAPACITY = 20_000


@pytest.fixture
def bed(request: pytest.FixtureRequest, table_name: str) -> Iterator[RingBed]:
    with ring_bed("postgresql", request, table_name, capacity=CAPACITY) as b:
        b.raw(f'ANALYZE "{b.spec.table}"')
        yield b


def test_hot_statements_never_scan_the_slots(bed: RingBed) -> None:
    q, ex = bed.queue, ExplainingExecutor(bed.ex)
    q.push(ex, {"n": 1})
    q.push_many(ex, [{"n": i} for i in range(10)])
    first = q.pop_batch(ex, 3)
    q.ack(ex, first[:1])
    q.extend(ex, first[1:2])
    q.fail(ex, first[2:3], "boom")
    acked, more = q.ack_pop(ex, first[1:2], 3)
    assert acked == 1 and len(more) == 3
    q.pop_batch(ex, 2, mode="at_most_once")
    with ex.atomic():
        q.pop_batch(ex, 2, mode="transactional")
    q.delete(ex, more[:1])
    bed.dead_pusher()
    bed.dead_popper()
    q.push(ex, {"n": 99})
    q.pop_batch(ex, 5)  # claims the dead pusher's number: marks it as a hole
    assert [s for s in ex.scans if s[0] == bed.spec.table] == []


def test_prepared_ring_statements_settle_on_generic_plans(bed: RingBed) -> None:
    """After its first five runs PostgreSQL keeps a prepared statement's generic plan unless
    re-planning with the actual values looks cheaper. The pops and acks once looked cheaper
    re-planned (the planner saw their one-element arrays) and were planned again at every
    call, which cost more than running them; their arrays now reach the planner as
    sub-selects, so both plans are costed alike."""
    q, ex = bed.queue, bed.ex
    for _ in range(12):
        q.push(ex, {"n": 1})
        q.ack(ex, q.pop_batch(ex, 1))
        q.push_many(ex, [{"n": 2}, {"n": 3}])
        _, held = q.ack_pop(ex, q.pop_batch(ex, 1), 1)
        q.extend(ex, held)
        q.fail(ex, held, "boom")
    rows = bed.ex.execute(
        "SELECT generic_plans, custom_plans, statement FROM pg_prepared_statements "
        "WHERE position(%(table)s in statement) > 0",
        {"table": bed.spec.table},
    )
    assert len(rows) >= 6
    assert [r[2] for r in rows if r[0] == 0] == []


def test_settling_a_batch_costs_work_linear_in_the_batch(bed: RingBed) -> None:
    """Each token reaches its slot by primary key: no plan node handles more than a few rows
    per token. A settle once compared every token with every slot (O(batch^2): an ack of
    1,000 took 70 ms, and the 1M-message soak ran at a third of split's rate)."""
    q, ex = bed.queue, WorkCountingExecutor(bed.ex)
    batch = 1000
    for settle in ("ack", "strict_ack", "extend", "fail", "release", "ack_pop"):
        q.push_many(bed.ex, [{"n": i} for i in range(batch)])
        items = q.pop_batch(bed.ex, batch)
        assert len(items) == batch
        ex.work.clear()
        if settle == "ack":
            q.ack(ex, items, strict=False)
        elif settle == "strict_ack":
            q.ack(ex, items)
        elif settle == "extend":
            q.extend(ex, items)
            q.ack(bed.ex, items)
        elif settle == "fail":
            q.fail(ex, items, "boom")
        elif settle == "release":
            q.release(ex, items)
            q.ack(bed.ex, q.pop_batch(bed.ex, batch))
        else:
            acked, more = q.ack_pop(ex, items, batch)
            assert acked == batch and more == []
        heaviest = max(ex.work)
        assert heaviest[0] <= 3 * batch, (settle, heaviest)
