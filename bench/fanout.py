"""``python -m bench.fanout``: fan-out to consumer groups against pushing copies (issue 22 §1).

One message delivered once to each of 3 consumer groups (email, analytics, search), through
the library as an application drives it, in one run on the bench's embedded PostgreSQL
(autovacuum on, synchronous commit):

* ``groups``: one split queue with ``QueueOptions.groups`` (the payload stored once, a meta
  row per group; dbqueue.split);
* ``split copies``: what users do without fan-out: three split queues, each message pushed
  into all three in one transaction;
* ``ring copies``: the same with three rings (dbqueue.ring, 4,096 slots each);
* ``ring groups``: one ring of 4,096 slots with ``QueueOptions.groups`` (the payload written
  once into its slot, a narrow state row per slot and group; dbqueue.ring, "Consumer
  groups").

Each system runs in a database of its own, for ``--seconds``: one pusher process (single
pushes, each its own transaction) and one consumer process per group (``ack_pop`` of up to 10
at a time: ack what it took, lease the next, one transaction), each on its own connection.
Systems run round by round (``--repeat``), so a busy machine slows each alike; the medians are
shown. Per system: pushes per second, messages each group handled per second (the slowest
group's shown), WAL bytes per pushed message (pg_current_wal_lsn() around the run), the bytes
of all its tables and indexes at the end and the most seen during the run (sampled every
second), and the dead tuples left.

Output: ``bench/reports/<date>-fanout.md`` and ``.json`` (``--out`` for another stem).
"""

from __future__ import annotations

import argparse
import datetime as dt
import multiprocessing as mp
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench import env as bench_env
from bench import report
from bench.systems.base import PAYLOAD
from dbqueue import (
    Field,
    FieldKind,
    QueueFull,
    QueueOptions,
    QueueSpec,
    RingQueue,
    SplitQueue,
    get_dialect,
)
from dbqueue.drivers.psycopg import PsycopgExecutor
from dbqueue.schema import create_ring_statements, create_statements

REPORTS = Path(__file__).resolve().parent / "reports"
POSTGRESQL = get_dialect("postgresql")
GROUPS = ("email", "analytics", "search")
FIELDS = (Field("payload", FieldKind.TEXT),)
#: What a consumer takes (and acks) at a time.
BATCH = 10
#: Idle consumers and a pusher of a full ring wait this long before trying again.
NAP = 0.001
CAPACITY = 4096
#: The backlog whose storage is measured (below the rings' capacity: no spill).
BACKLOG = 4000
OPTIONS = {"notify_interval": None}


@dataclass(frozen=True)
class System:
    """One way to deliver every message to every group: how to make its queues, what one
    push is, and each group's queue to consume."""

    key: str
    label: str
    queues: Callable[[], list[SplitQueue | RingQueue]]
    #: The consumers' queues, one per group, from ``queues()``.
    consumers: Callable[[list[SplitQueue | RingQueue]], list[SplitQueue | RingQueue]]


def _grouped() -> list[SplitQueue | RingQueue]:
    spec = QueueSpec("fan_groups", FIELDS, QueueOptions(groups=GROUPS, **OPTIONS))  # type: ignore[arg-type]
    return [SplitQueue(spec, POSTGRESQL)]


def _split_copies() -> list[SplitQueue | RingQueue]:
    return [
        SplitQueue(QueueSpec(f"fan_split_{g}", FIELDS, QueueOptions(**OPTIONS)), POSTGRESQL)  # type: ignore[arg-type]
        for g in GROUPS
    ]


def _ring_copies() -> list[SplitQueue | RingQueue]:
    options = QueueOptions(capacity=CAPACITY, when_full="wait", **OPTIONS)  # type: ignore[arg-type]
    return [RingQueue(QueueSpec(f"fan_ring_{g}", FIELDS, options), POSTGRESQL) for g in GROUPS]


def _ring_grouped() -> list[SplitQueue | RingQueue]:
    options = QueueOptions(capacity=CAPACITY, when_full="wait", groups=GROUPS, **OPTIONS)  # type: ignore[arg-type]
    return [RingQueue(QueueSpec("fan_ring_groups", FIELDS, options), POSTGRESQL)]


def _groups_of(queues: list[SplitQueue | RingQueue]) -> list[SplitQueue | RingQueue]:
    (queue,) = queues
    return [queue.group(g) for g in GROUPS]


SYSTEMS = (
    System("groups", "one queue, 3 consumer groups", _grouped, _groups_of),
    System("split-copies", "3 split queues, 3 copies per push", _split_copies, list),
    System("ring-groups", "one ring, 3 consumer groups", _ring_grouped, _groups_of),
    System("ring-copies", "3 rings, 3 copies per push", _ring_copies, list),
)
BY_KEY = {s.key: s for s in SYSTEMS}


def setup(dsn: str, system: System) -> None:
    """The system's tables, in a database of its own."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for queue in system.queues():
            make = create_statements if isinstance(queue, SplitQueue) else create_ring_statements
            for statement in make(queue.spec, POSTGRESQL):
                conn.execute(statement)


def pusher(dsn: str, key: str, seconds: float, counts: Any) -> None:
    """Push for ``seconds``: into the queue, or each copy into every queue in one
    transaction; the count in ``counts[0]``, and the pushes a full ring refused (QueueFull,
    after waiting push_timeout: a group whose consumer stopped) in ``counts[-1]``."""
    queues = BY_KEY[key].queues()
    row = {"payload": PAYLOAD}
    pushed = refused = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        ex = PsycopgExecutor(conn)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                if len(queues) == 1:
                    queues[0].push(ex, row)
                else:
                    with ex.atomic():
                        for queue in queues:
                            queue.push(ex, row)
            except QueueFull:
                refused += 1
                continue
            pushed += 1
    counts[0], counts[len(counts) - 1] = pushed, refused


def consumer(dsn: str, key: str, index: int, seconds: float, counts: Any) -> None:
    """Group ``index``'s consumer for ``seconds``: ack_pop of up to BATCH at a time; the
    count handled in ``counts[1 + index]``."""
    system = BY_KEY[key]
    queue = system.consumers(system.queues())[index]
    handled = 0
    held: list[Any] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        ex = PsycopgExecutor(conn)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            acked, held = queue.ack_pop(ex, held, BATCH)
            handled += acked
            if not held:
                time.sleep(NAP)
        handled += len(queue.ack(ex, held, strict=False))
    counts[1 + index] = handled


def _lsn(conn: psycopg.Connection[Any]) -> int:
    return int(conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0])  # type: ignore[index]


def _bytes(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_stat_user_tables"
    ).fetchone()
    return int(row[0])  # type: ignore[index]


def _vacuum_stats(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    """The dead tuples of all the tables, and how many times autovacuum has run on them."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT coalesce(sum(n_dead_tup), 0), coalesce(sum(autovacuum_count), 0) "
        "FROM pg_stat_user_tables"
    ).fetchone()
    return int(row[0]), int(row[1])  # type: ignore[index]


def run_once(
    dsn: str, system: System, seconds: float, consumers: int = len(GROUPS)
) -> dict[str, Any]:
    """One run of ``system``: its roles for ``seconds`` (the first ``consumers`` groups'
    consumers: the others stopped), and what the server saw."""
    ctx = mp.get_context("spawn")
    counts = ctx.Array("q", 2 + len(GROUPS))
    with psycopg.connect(dsn, autocommit=True) as conn:
        start_bytes, wal0 = _bytes(conn), _lsn(conn)
        vacuums0 = _vacuum_stats(conn)[1]
        procs = [ctx.Process(target=pusher, args=(dsn, system.key, seconds, counts))]
        procs += [
            ctx.Process(target=consumer, args=(dsn, system.key, i, seconds, counts))
            for i in range(consumers)
        ]
        for p in procs:
            p.start()
        peak = start_bytes
        while any(p.is_alive() for p in procs):
            peak = max(peak, _bytes(conn))
            time.sleep(1.0)
        for p in procs:
            p.join()
            if p.exitcode != 0:
                raise RuntimeError(f"{system.key}: a role exited with {p.exitcode}")
        wal = _lsn(conn) - wal0
        end_bytes = _bytes(conn)
        time.sleep(1.0)  # the roles' statistics reach the server's counters
        dead, vacuums = _vacuum_stats(conn)
    pushed, handled, refused = counts[0], list(counts[1 : 1 + consumers]), counts[-1]
    return {
        "pushes_per_s": round(pushed / seconds, 1),
        "handled_per_s": [round(h / seconds, 1) for h in handled],
        "slowest_group_per_s": round(min(handled) / seconds, 1),
        "wal_bytes_per_push": round(wal / pushed) if pushed else None,
        "bytes_start": start_bytes,
        "bytes_end": end_bytes,
        "bytes_peak": max(peak, end_bytes),
        "dead_tuples": dead,
        "autovacuums": vacuums - vacuums0,
        "refused_pushes": refused,
    }


def backlog(dsn: str, system: System, n: int) -> int:
    """The bytes ``n`` more messages take while no group has consumed them (pushed in batches
    of 1,000 into a drained queue, then removed): the storage of the payload and of each
    group's delivery rows, before any churn."""
    queues = system.queues()
    rows = [{"payload": PAYLOAD}] * n
    with psycopg.connect(dsn, autocommit=True) as conn:
        ex = PsycopgExecutor(conn)
        for queue in system.consumers(queues):
            queue.purge(ex)
        conn.execute("VACUUM")
        before = _bytes(conn)
        with ex.atomic():
            for queue in queues:
                queue.push_many(ex, rows)
        grown = _bytes(conn) - before
        for queue in system.consumers(queues):
            queue.purge(ex)
    return grown


def measure(env: bench_env.BenchEnv, seconds: float, repeat: int) -> dict[str, Any]:
    """Every system, ``repeat`` rounds of one run each; per system its runs and medians."""
    dsns = {}
    for system in SYSTEMS:
        dsns[system.key] = env.database(f"fanout_{system.key.replace('-', '_')}")
        setup(dsns[system.key], system)
    runs: dict[str, list[dict[str, Any]]] = {s.key: [] for s in SYSTEMS}
    try:
        # On the tables as created: after the runs, their free space would hold the backlog.
        stored = {s.key: backlog(dsns[s.key], s, BACKLOG) for s in SYSTEMS}
        for _ in range(repeat):
            for system in SYSTEMS:
                runs[system.key].append(run_once(dsns[system.key], system, seconds))
        # A stopped group: the last group's consumer does not run.
        lagging = {
            s.key: run_once(dsns[s.key], s, seconds, len(GROUPS) - 1) for s in SYSTEMS
        }  # fmt: skip
    finally:
        for system in SYSTEMS:
            env.drop(f"fanout_{system.key.replace('-', '_')}")
    results = {}
    for system in SYSTEMS:
        got = runs[system.key]
        medians = {
            k: statistics.median(r[k] for r in got)
            for k in ("pushes_per_s", "slowest_group_per_s", "wal_bytes_per_push",
                      "bytes_end", "bytes_peak", "dead_tuples", "autovacuums")
        }  # fmt: skip
        medians["backlog_bytes_per_message"] = round(stored[system.key] / BACKLOG)
        results[system.key] = {
            "label": system.label,
            "runs": got,
            "median": medians,
            "lagging": lagging[system.key],
        }
    return results


def markdown(meta: dict[str, Any], results: dict[str, Any]) -> str:
    """The report: each system's medians and their ratio to the copies of its layout."""
    bases = {
        key: results[copies]["median"]
        for key, copies in (
            ("groups", "split-copies"), ("split-copies", "split-copies"),
            ("ring-groups", "ring-copies"), ("ring-copies", "ring-copies"),
        )
        if key in results and copies in results
    }  # fmt: skip
    lines = [
        "# Fan-out: 3 consumer groups against 3 copies (issue 22 §1)",
        "",
        f"{meta['started']}, {meta['server']}; load average {meta['load'][0]:.1f} → "
        f"{meta['load'][1]:.1f} on {meta['cpus']} CPUs; source {meta['source']}. "
        f"{meta['repeat']} rounds of {meta['seconds_per_run']:g} s per system, medians: 1 "
        f"pusher (single pushes, synchronous commit), 1 consumer per group (ack_pop of up to "
        f"{BATCH}), payload {len(PAYLOAD)} bytes.",
        "",
        "| system | pushes/s | slowest group msg/s | WAL B/push | backlog B/message "
        "| tables end | tables peak | dead tuples | pushes vs copies "
        "| WAL vs copies |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key, r in results.items():
        m, base = r["median"], bases[key]
        lines.append(
            f"| {r['label']} | {m['pushes_per_s']:,.0f} | {m['slowest_group_per_s']:,.0f} "
            f"| {m['wal_bytes_per_push']:,.0f} | {m['backlog_bytes_per_message']:,.0f} "
            f"| {m['bytes_end'] / 1024:,.0f} KiB "
            f"| {m['bytes_peak'] / 1024:,.0f} KiB | {m['dead_tuples']:,.0f} "
            f"| {m['pushes_per_s'] / base['pushes_per_s']:.2f}x "
            f"| {m['wal_bytes_per_push'] / base['wal_bytes_per_push']:.2f}x |"
        )
    lines += [
        "",
        "Copies: 3 queues of the same layout, each message pushed into all three in one "
        "transaction (split groups against split copies, ring groups against ring copies).",
        "",
        f"Backlog B/message: what {BACKLOG:,} messages no group has consumed yet add to the "
        "tables (a ring's slots are preallocated: its tables do not grow, their "
        f'{CAPACITY:,} slots per ring are the "tables end" column). Tables end and peak: all '
        "the system's tables and indexes after the last run and the most seen during the "
        "runs, with autovacuum on.",
        "",
        "Runs (pushes/s; each group's msg/s; autovacuums of its tables during the run):",
        "",
    ]
    lagging = [
        "",
        f"A stopped group: one more run of each system with {GROUPS[-1]}'s consumer stopped "
        f"(the others' msg/s; the tables' growth over the run):",
        "",
    ]
    for r in results.values():
        lag = r["lagging"]
        running = zip(GROUPS, lag["handled_per_s"], strict=False)  # the stopped one has none
        lagging.append(
            f"- {r['label']}: {lag['pushes_per_s']:,.0f} pushes/s; "
            f"{', '.join(f'{g} {h:,.0f}' for g, h in running)} msg/s; "
            f"tables {lag['bytes_start'] / 1024:,.0f} → {lag['bytes_end'] / 1024:,.0f} KiB"
            + (
                f"; {lag['refused_pushes']:,} pushes refused (QueueFull after push_timeout)"
                if lag["refused_pushes"]
                else ""
            )
        )
    for key, r in results.items():
        runs = "; ".join(
            f"{x['pushes_per_s']:,.0f} ({', '.join(f'{h:,.0f}' for h in x['handled_per_s'])}; "
            f"{x['autovacuums']} autovacuums)"
            for x in r["runs"]
        )
        lines.append(f"- {key}: {runs}")
    return "\n".join(lines + lagging) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fanout", description=__doc__)
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each run")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (medians are shown)")
    parser.add_argument("--out", type=Path, help="report path without suffix")
    args = parser.parse_args(argv)
    env = bench_env.start(quick=False, sync_commit=True, scale=None)
    started, t0, load = dt.datetime.now(dt.UTC), time.perf_counter(), os.getloadavg()[0]
    results = measure(env, args.seconds, args.repeat)
    meta = report.study_meta(env, started, time.perf_counter() - t0, load) | {
        "seconds_per_run": args.seconds,
        "repeat": args.repeat,
    }
    stem = args.out or REPORTS / f"{started:%Y-%m-%d}-fanout"
    report.write_study(stem, meta, results, markdown(meta, results))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
