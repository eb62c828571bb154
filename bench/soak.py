"""The bloat soak (one run per system: a soak of minutes is its own repetition, which the
report says), and the table statistics it and the long-transaction workload read."""

from __future__ import annotations

import time

import psycopg

from bench.env import BenchEnv
from bench.measure import Measurement
from bench.systems.base import System

#: The tables named by ``%(tables)s`` and, for a partitioned one (a ring of many slots), its
#: partitions, which hold its rows (a partitioned table has no storage of its own).
RELATIONS = (
    "SELECT x.r FROM unnest(%(tables)s::text[]) AS t, LATERAL (SELECT t::regclass AS r "
    "UNION ALL SELECT p.relid FROM pg_partition_tree(t::regclass) AS p WHERE p.isleaf) AS x"
)


def table_stats(system: System) -> tuple[int, int]:
    """Total size in bytes (tables, indexes, TOAST) and dead tuples of the system's tables."""
    size, dead, _, _ = _table_counters(system)
    return size, dead


def _table_counters(system: System) -> tuple[int, int, int, int]:
    """Size and dead tuples as :func:`table_stats`, and the tables' lifetime counts of updates
    and of HOT updates (heap-only: the new version on the same page, no index entry)."""
    # A backend sends its pending activity statistics when it exits; an idle one may keep
    # them ~10 s (PostgreSQL >= 15). The system reconnects at its next operation.
    system.close()
    time.sleep(1.2)  # then they reach the shared counters
    with psycopg.connect(system.dsn) as conn:
        size = dead = updates = hot = 0
        for table in system.tables:
            row = conn.execute(
                "SELECT sum(pg_total_relation_size(c.oid)), sum(coalesce(s.n_dead_tup, 0)), "
                "sum(coalesce(s.n_tup_upd, 0)), sum(coalesce(s.n_tup_hot_upd, 0)) "
                "FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid "
                f"WHERE c.oid IN ({RELATIONS})",
                {"tables": [table]},
            ).fetchone()
            assert row is not None
            size, dead = size + int(row[0]), dead + int(row[1])
            updates, hot = updates + int(row[2]), hot + int(row[3])
    return size, dead, updates, hot


#: The bloat soak's batch: push_many, pop_batch and ack of this many messages at a time.
CHURN_BATCH = 1000


def bloat(env: BenchEnv, system: System, repeat: int) -> list[Measurement]:
    """Pass N messages through (push_many, pop, ack in batches of 1,000) after a warm-up of
    N/10, and compare the tables' size and dead tuples before and after."""
    n = env.bloat_messages or env.size(1_000_000, 10_000)
    system.expect(CHURN_BATCH)
    system.reset()
    system.churn(max(n // 10, CHURN_BATCH), CHURN_BATCH)
    size0, dead0, updates0, hot0 = _table_counters(system)
    start = time.perf_counter()
    system.churn(n, CHURN_BATCH)
    rate = n / (time.perf_counter() - start)
    size1, dead1, updates1, hot1 = _table_counters(system)
    params = {"messages": n}
    growth = size1 / size0 if size0 else float("nan")
    out = [
        Measurement(system.name, "bloat_size", params, [size1 / 1024], unit="KiB",
                    extra={"before_kib": round(size0 / 1024), "growth": f"{growth:.2f}x"}),
        Measurement(system.name, "bloat_dead_tuples", params, [float(dead1)], unit="tuples",
                    extra={"before": dead0}),
        Measurement(system.name, "bloat_churn_rate", params, [rate], extra={"runs": 1}),
    ]  # fmt: skip
    if updates1 > updates0:  # systems that update rows (a DELETE-only queue has none)
        hot = 100 * (hot1 - hot0) / (updates1 - updates0)
        out.append(Measurement(system.name, "bloat_hot_updates", params, [hot], unit="%"))
    return out
