"""The long workloads: the bloat soak and the long-transaction test. Each is one run per
system (a soak of minutes is its own repetition), which the report says."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psycopg
from psycopg import sql

from bench.env import BenchEnv
from bench.measure import Measurement
from bench.systems.base import System
from bench.workloads import STEADY_CONSUMERS, STEADY_PRODUCERS, run_steady


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
                "SELECT pg_total_relation_size(c.oid), coalesce(s.n_dead_tup, 0), "
                "coalesce(s.n_tup_upd, 0), coalesce(s.n_tup_hot_upd, 0) "
                "FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid "
                "WHERE c.oid = %s::regclass",
                (table,),
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


LONGTX_RATE = 1000.0
#: The messages a ring holds in the long-transaction run: 5 s of the offered rate (twice that
#: in slots), as a user would size it for consumers that keep up. Sized for the whole run
#: (300,000 messages) a ring is never lapped, and compaction would copy all its slots.
LONGTX_BACKLOG = 5 * int(LONGTX_RATE)
#: After the held transaction ends, the run goes on this long before the tables are measured
#: again: what is left of what the transaction kept (the issue allows 60 s).
LONGTX_RECOVERY = 60.0


def longtx(env: BenchEnv, system: System, repeat: int) -> list[Measurement]:
    """Steady state at 1,000 msg/s, without and then with a REPEATABLE READ transaction held
    open the whole time (it pins the xmin horizon: vacuum cannot remove what queues delete),
    then a minute more without it; the tables' size before, at the end of the hold and after
    that minute."""
    seconds = 6.0 if env.quick else env.longtx_seconds
    system.expect(LONGTX_BACKLOG)
    out = []
    for held in (False, True):
        system.reset()
        size0 = table_stats(system)[0] if system.tables else None
        holder = _TransactionHolder(system.dsn) if held else None
        server0 = _server_cpu(system.dsn)
        run = run_steady(env, system, LONGTX_RATE, seconds)
        server1 = _server_cpu(system.dsn)
        server_cpu = server1 - server0 if server0 is not None and server1 is not None else None
        size1 = table_stats(system)[0] if system.tables else None
        if holder is not None:
            holder.release()
        size2 = None
        if held and system.tables:
            run_steady(env, system, LONGTX_RATE, 6.0 if env.quick else LONGTX_RECOVERY)
            size2 = table_stats(system)[0]
        dead = table_stats(system)[1] if system.tables else None
        params = {"rate": LONGTX_RATE, "long_transaction": "held" if held else "none",
                  "producers": STEADY_PRODUCERS, "consumers": STEADY_CONSUMERS}  # fmt: skip
        if not run.latencies:
            continue
        extra = {"seconds": seconds, "client_cpu_s": round(run.client_cpu, 1),
                 "server_cpu_s": None if server_cpu is None else round(server_cpu, 1),
                 "dead_tuples_after": dead, "kib_before": _kib(size0), "kib_end": _kib(size1),
                 "kib_after_recovery": _kib(size2)}  # fmt: skip
        served = len(run.latencies) / seconds
        out += [
            Measurement(system.name, "longtx_throughput", params, [served], extra=extra),
            Measurement(system.name, "longtx_p50", params, [run.percentile(0.5) * 1000], unit="ms"),
            Measurement(
                system.name, "longtx_p99", params, [run.percentile(0.99) * 1000], unit="ms"
            ),
        ]
    return out


def _kib(size: int | None) -> int | None:
    return None if size is None else round(size / 1024)


class _TransactionHolder:
    """A REPEATABLE READ transaction that has taken its snapshot and stays open."""

    def __init__(self, dsn: str) -> None:
        # autocommit, so that our own BEGIN opens the transaction (psycopg would open one
        # itself otherwise, and the isolation level would not apply)
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        self.conn.execute("SELECT count(*) FROM pg_class")  # takes the snapshot

    def release(self) -> None:
        self.conn.execute("ROLLBACK")
        self.conn.close()


def _server_cpu(dsn: str) -> float | None:
    """CPU seconds used so far by the PostgreSQL server's processes, read from /proc (the
    server must run on this machine and its data directory be readable), else None."""
    try:
        with psycopg.connect(dsn) as conn:
            datadir = conn.execute(sql.SQL("SHOW data_directory")).fetchone()[0]  # type: ignore[index]
        postmaster = int(Path(datadir, "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, psycopg.Error):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(entry.name), int(fields[1])
        if pid == postmaster:
            # utime, stime, and cutime, cstime: the backends that have already exited
            total += sum(int(f) for f in fields[11:15]) / ticks
        elif ppid == postmaster:
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total
