"""``python -m bench.lease``: how soon a dead worker's items come back, by lease, and what a
rescue costs.

For each lease (``--leases``, seconds), on a split queue of its own, every round:

1. pushes ``--batch`` messages and starts worker A (the core :class:`~dbqueue.worker.Worker`
   in a process of its own) whose handler takes the whole batch and blocks, then worker B,
   which records each message it handles: *idle* (nothing else to do), or *busy* (a backlog
   of filler messages taking a quarter of a second each, so that only its maintenance
   thread's periodic rescue brings A's items back);
2. waits a random time between a third and two thirds of the lease (so the kill falls at any
   point of the lease thread's extension cycle), stops A with SIGSTOP and reads how much of
   the batch's lease is left: how long a stalled but living worker (a frozen VM, a stopped
   process) could have stalled before its items were delivered again, the *stall survived*;
3. kills A (SIGKILL) and waits until the batch is back: the time from the stop until an idle
   B handled the last message of the batch, or until a busy B's rescue made the last of them
   ready again (behind the backlog), is the *recovery* (the lease's rest plus the rescue).

Then the *rescue cost*: one :meth:`rescue` call (what a worker runs every third of the
shortest lease, 1 to 30 s apart, or twenty times its duration) finding nothing to rescue,
on a split queue with a backlog and on rings of ``--slots`` slots, half full. Output:
``bench/results/<date>-lease/report.md`` and ``results.json``. The machine's load average is
recorded, since process start-up and scheduling delays show in the recovery.

``python -m bench.lease worker LEASE LOG MODE`` is a worker process of the run (DSN in
``DBQUEUE_BENCH_DSN``): it appends ``ready``, then ``took N`` (MODE ``block``: and blocks)
or one ``key perf_counter`` line per message (``idle``, ``busy``) to LOG.
``time.perf_counter()`` is the system-wide monotonic clock on Linux, so the run compares the
processes' times.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg

from bench import env as bench_env
from bench.measure import Measurement
from dbqueue import Field, FieldKind, QueueOptions, QueueSpec, RingQueue, SplitQueue, get_dialect
from dbqueue.drivers.psycopg import PsycopgExecutor
from dbqueue.message import State
from dbqueue.schema import create_ring_statements, create_statements
from dbqueue.worker import Consumer, Worker
from dbqueue.worker_queue import ExecutorQueue

RESULTS = Path(__file__).resolve().parent / "results"
POSTGRESQL = get_dialect("postgresql")
FIELDS = (Field("payload", FieldKind.TEXT),)
TABLE = "lease_bench"
#: Seconds to wait for a worker to start and take its batch, on a loaded machine.
START_TIMEOUT = 60.0
#: Seconds a busy worker B spends on each filler message.
FILLER_SECONDS = 0.25
FLEETS = ("idle", "busy")
#: The rescue cost's messages: the size the harness's systems push (bench.systems.base; not
#: imported, as importing bench.systems registers the SQLAlchemy systems' tables).
PAYLOAD = "x" * 300


def spec(lease: float, capacity: int | None = None) -> QueueSpec:
    """The bench's queue: a split queue, or a ring of ``capacity`` slots."""
    options = QueueOptions(lease=dt.timedelta(seconds=lease), capacity=capacity)
    return QueueSpec(TABLE if capacity is None else f"{TABLE}_ring_{capacity}", FIELDS, options)


def worker(lease: float, log: str, mode: str) -> None:
    """A worker process of the run (see the module docstring)."""
    dsn = bench_env.child_dsn()
    out = open(log, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 (lives as the process)
    stuck = threading.Event()

    def block(items: Sequence[Any]) -> None:
        out.write(f"took {len(items)}\n")
        stuck.wait()

    def handle(m: Any) -> None:
        key = m.payload["payload"]
        if key.startswith("filler"):
            time.sleep(FILLER_SECONDS)
        out.write(f"{key} {time.perf_counter()}\n")

    binding = ExecutorQueue(
        SplitQueue(spec(lease), POSTGRESQL),
        lambda: PsycopgExecutor(psycopg.connect(dsn, autocommit=True)),
        listen=lambda: psycopg.connect(dsn, autocommit=True),
    )
    if mode == "block":
        consumer = Consumer(binding, block, batch=True, batch_size=1000)
    else:  # a busy worker takes one message at a time, so that it is never idle
        consumer = Consumer(binding, handle, batch_size=1 if mode == "busy" else 1000)
    w = Worker([consumer], summary_every=0)
    out.write("ready\n")
    w.run()


class Round:
    """One kill: worker A holding the batch, worker B waiting to take it over."""

    def __init__(self, dsn: str, lease: float, folder: Path, name: str) -> None:
        self.dsn, self.lease = dsn, lease
        self.queue = SplitQueue(spec(lease), POSTGRESQL)
        self.a_log, self.b_log = folder / f"a-{name}.log", folder / f"b-{name}.log"
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, log: Path, mode: str, wait_for: str) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, "-m", "bench.lease", "worker", str(self.lease), str(log), mode]
        proc = subprocess.Popen(cmd, env=bench_env.child_environ(self.dsn))
        self.procs.append(proc)
        wait_lines(log, lambda lines: any(line.startswith(wait_for) for line in lines),
                   START_TIMEOUT, proc)  # fmt: skip
        return proc

    def take(self, keys: list[str], fleet: str = "idle") -> subprocess.Popen[bytes]:
        """Push ``keys``; start A and, once A took them, B (``fleet``: idle or busy, with
        fillers enough for two leases); return A."""
        self.push(keys)
        a = self.start(self.a_log, "block", "took")
        if fleet == "busy":
            self.push([f"filler:{i}" for i in range(int((2 * self.lease + 30) / FILLER_SECONDS))])
        self.start(self.b_log, fleet, "ready")
        return a

    def push(self, keys: list[str]) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            self.queue.push_many(PsycopgExecutor(conn), [{"payload": k} for k in keys])

    def rescued(self, keys: list[str]) -> float:
        """Wait until none of ``keys`` is still held under A's lease; when, by perf_counter."""
        meta, data = (POSTGRESQL.quote(t) for t in (self.queue.spec.meta_table, TABLE))
        query = (
            f"SELECT count(*) FROM {meta} AS m JOIN {data} AS d ON d.id = m.id "
            f"WHERE m.state = %s AND m.attempts = 1 AND d.payload = ANY(%s)"
        )
        deadline = time.monotonic() + 2 * self.lease + START_TIMEOUT
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while time.monotonic() < deadline:
                row = conn.execute(query, [int(State.LEASED), keys]).fetchone()
                if row is not None and row[0] == 0:
                    return time.perf_counter()
                time.sleep(0.02)
        raise RuntimeError(f"A's items still leased after {2 * self.lease + START_TIMEOUT} s")

    def handled(self, keys: list[str]) -> list[tuple[str, float]]:
        """Wait until B handled every message of ``keys``; what B handled: (key, when)."""
        wanted = set(keys)
        lines = wait_lines(self.b_log, lambda got: wanted <= {g.split()[0] for g in got},
                           2 * self.lease + START_TIMEOUT)  # fmt: skip
        return [(key, float(when)) for key, when in (line.split() for line in lines[1:])]

    def run(self, keys: list[str], pause: float, fleet: str) -> tuple[float, float]:
        """Kill A after ``pause`` seconds with the batch in hand: (stall survived, recovery)
        in seconds."""
        a = self.take(keys, fleet)
        time.sleep(pause)
        a.send_signal(signal.SIGSTOP)
        stopped = time.perf_counter()
        left = lease_left(self.dsn)
        a.kill()
        a.wait()
        if fleet == "busy":
            return left, self.rescued(keys) - stopped
        wanted = set(keys)
        return left, max(when for key, when in self.handled(keys) if key in wanted) - stopped

    def close(self) -> None:
        """Stop the workers still running; empty the queue (a busy B leaves fillers)."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            names = (self.queue.spec.meta_table, TABLE)
            conn.execute(f"TRUNCATE {', '.join(POSTGRESQL.quote(t) for t in names)}")


def wait_lines(
    path: Path, done: Any, timeout: float, proc: subprocess.Popen[bytes] | None = None
) -> list[str]:
    """The lines of ``path`` once ``done(lines)`` holds; RuntimeError after ``timeout`` s or
    if ``proc`` ended first."""
    deadline = time.monotonic() + timeout
    while True:
        lines = path.read_text().splitlines() if path.exists() else []
        if done(lines):
            return lines
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"worker ended with code {proc.returncode} ({path})")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting on {path}")
        time.sleep(0.02)


def lease_left(dsn: str) -> float:
    """Seconds until the first lease of the queue's leased items expires."""
    meta = POSTGRESQL.quote(spec(1).meta_table)
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            f"SELECT extract(epoch FROM min(lease_until) - clock_timestamp()) FROM {meta} "
            f"WHERE state = %s",
            [int(State.LEASED)],
        ).fetchone()
    if row is None or row[0] is None:
        raise RuntimeError("worker A holds no leased item")
    return float(row[0])


def create_queue(dsn: str, lease: float) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in create_statements(spec(lease), POSTGRESQL):
            conn.execute(statement)


def kill_rounds(
    env: bench_env.BenchEnv,
    lease: float,
    rounds: int,
    batch: int,
    folder: Path,
    rng: random.Random,
    fleets: Sequence[str] = FLEETS,
) -> list[Measurement]:
    """The recovery (per fleet) and stall-survived figures of ``lease``; the fleets take
    turns within each round."""
    suffix = f"lease_{lease:g}".replace(".", "_")
    dsn = env.database(suffix)
    create_queue(dsn, lease)
    (folder / suffix).mkdir(parents=True, exist_ok=True)
    stalls: list[float] = []
    recoveries: dict[str, list[float]] = {fleet: [] for fleet in fleets}
    for number in range(rounds):
        for fleet in fleets:
            keys = [f"{number}{fleet[0]}:{i}" for i in range(batch)]
            one = Round(dsn, lease, folder / suffix, f"{number}-{fleet}")
            try:
                left, back = one.run(keys, rng.uniform(lease / 3, 2 * lease / 3), fleet)
            finally:
                one.close()
            stalls.append(left)
            recoveries[fleet].append(back)
            print(f"lease {lease:g} s, round {number + 1}, {fleet} B: stall survived "
                  f"{left:.2f} s, back after {back:.2f} s", flush=True)  # fmt: skip
    env.drop(suffix)
    # The lease thread extends a batch once a third of its lease passed, looking every tick.
    tick = max(min(lease / 6, 1.0), 0.01)
    rescue_every = min(30.0, max(lease / 3, 1.0))
    extra = {"batch": batch, "rescue_every_s": round(rescue_every, 2)}
    out = [
        Measurement("core-worker", "lease_recovery", {"lease_s": lease, "fleet": fleet}, runs,
                    unit="s", extra=extra)
        for fleet, runs in recoveries.items()
    ]  # fmt: skip
    floor = {"floor_s": round(lease - lease / 3 - tick, 2)}
    stall = Measurement(
        "core-worker", "lease_stall_survived", {"lease_s": lease}, stalls, "s", floor
    )
    return [*out, stall]


def rescue_cost(env: bench_env.BenchEnv, sizes: list[int], repeat: int) -> list[Measurement]:
    """One rescue finding nothing to rescue: on a split queue holding ``max(sizes) // 2``
    messages, and on a ring of each size half full (autovacuum's analyze done, as in a
    deployment)."""
    dsn = env.database("lease_rescue")
    out = []
    cases: list[tuple[str, int | None, int]] = [("split", None, max(sizes) // 2)]
    cases += [("ring", slots, slots // 2) for slots in sizes]
    with psycopg.connect(dsn, autocommit=True) as conn:
        ex = PsycopgExecutor(conn)
        for layout, slots, messages in cases:
            s = spec(60, slots)
            queue: SplitQueue | RingQueue
            if slots is None:
                queue, statements = SplitQueue(s, POSTGRESQL), create_statements(s, POSTGRESQL)
            else:
                queue, statements = RingQueue(s, POSTGRESQL), create_ring_statements(s, POSTGRESQL)
            for statement in statements:
                conn.execute(statement)
            rows = [{"payload": PAYLOAD}] * 1000
            for start in range(0, messages, 1000):
                queue.push_many(ex, rows[: min(1000, messages - start)])
            conn.execute("VACUUM ANALYZE")
            runs = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                queue.rescue(ex)
                runs.append((time.perf_counter() - t0) * 1000)
            system = "split-queue" if slots is None else "ring-queue"
            params = {"layout": layout, "slots": slots or "-", "messages": messages}
            out.append(Measurement(system, "rescue_ms", params, runs, unit="ms"))
            print(f"rescue {layout} {slots or ''}: {sorted(runs)[len(runs) // 2]:.1f} ms",
                  flush=True)  # fmt: skip
    env.drop("lease_rescue")
    return out


def _spread(m: Measurement | None) -> str:
    return "-" if m is None else f"{min(m.runs):.1f} / {m.median:.1f} / {max(m.runs):.1f} s"


def summary(results: list[Measurement]) -> list[str]:
    """The report's table by lease: recovery, stall survived, extension writes, rescue."""
    by = {(m.workload, m.params.get("lease_s"), m.params.get("fleet")): m for m in results}
    leases = sorted({m.params["lease_s"] for m in results if "lease_s" in m.params}, reverse=True)
    lines = [
        "## By lease",
        "",
        "Min / median / max. Idle B: from the stop of worker A (its batch in hand) until an "
        "idle worker B handled the last message of the batch. Busy B: until the last of "
        "them was ready again, rescued by a worker B busy with a backlog (its maintenance "
        "thread's periodic rescue). Stall survived: the lease left when A stopped, the "
        "longest stall it would have come back from without a second delivery; its floor "
        "is the lease minus the extension period (a third of the lease, plus the lease "
        "thread's tick). Extensions: statements a minute for a batch held that long.",
        "",
        "| lease | back after, idle B | ready again, busy B | stall survived | floor | "
        "extensions / min | rescue every |",
        "|---:|---|---|---|---:|---:|---:|",
    ]
    for lease in leases:
        stall = by[("lease_stall_survived", lease, None)]
        idle, busy = (by.get(("lease_recovery", lease, fleet)) for fleet in FLEETS)
        every = (idle or busy).extra["rescue_every_s"]  # type: ignore[union-attr]
        lines.append(
            f"| {lease:g} s | {_spread(idle)} | {_spread(busy)} | {_spread(stall)} | "
            f"{stall.extra['floor_s']:.1f} s | {180 / lease:.0f} | {every:g} s |"
        )
    lines.append("")
    return lines


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.lease", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--leases", default="60,15,10", help="leases in seconds, comma-separated")
    p.add_argument("--rounds", type=int, default=5, help="kills per lease and fleet")
    p.add_argument("--fleets", default=",".join(FLEETS), help="worker B: idle, busy or both")
    p.add_argument("--batch", type=int, default=10, help="messages in the killed worker's hand")
    p.add_argument("--slots", default="2000,200000", help="ring sizes of the rescue cost")
    p.add_argument("--rescue-repeat", type=int, default=20, help="rescues timed per queue")
    p.add_argument("--seed", type=int, default=25, help="of the random pauses before a kill")
    p.add_argument("--out", type=Path, help="output folder (default bench/results/<date>-lease)")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    if argv[:1] == ["worker"]:
        worker(float(argv[1]), argv[2], argv[3])
        return 0
    # Here, not at the top: bench.report imports bench.systems, which declares the SQLAlchemy
    # systems' tables; the test suite imports this module beside the SQLAlchemy tests.
    from bench import report

    args = parse(argv)
    leases = [float(x) for x in args.leases.split(",") if x]
    sizes = [int(x) for x in args.slots.split(",") if x]
    env = bench_env.start(quick=False, sync_commit=True, scale=None)
    started, t0 = dt.datetime.now(dt.UTC), time.perf_counter()
    load_before = os.getloadavg()
    code = report.source()
    out = args.out or RESULTS / f"{started:%Y-%m-%d}-lease"
    rng = random.Random(args.seed)
    fleets = [f for f in args.fleets.split(",") if f]
    results: list[Measurement] = []
    for lease in leases:
        results += kill_rounds(env, lease, args.rounds, args.batch, out / "logs", rng, fleets)
    results += rescue_cost(env, sizes, args.rescue_repeat)
    load_after = os.getloadavg()
    env.repeat = env.process_repeat = args.rounds
    env.notes += [
        f"{args.rounds} kills per lease and fleet, {args.batch} messages in hand, each after a "
        f"random pause of a third to two thirds of the lease (seed {args.seed}); workers: "
        f"dbqueue.worker.Worker with its default rescue interval",
        f"rescue cost: {args.rescue_repeat} rescues per queue, nothing to rescue, after "
        f"VACUUM ANALYZE",
        "load average (1, 5, 15 min) at the start: "
        + ", ".join(f"{x:.2f}" for x in load_before)
        + "; at the end: "
        + ", ".join(f"{x:.2f}" for x in load_after),
    ]
    meta = report.run_meta(env, started, ["core-worker", "split-queue", "ring-queue"],
                           time.perf_counter() - t0, None, code)  # fmt: skip
    path = report.write(out, meta, results, preface=summary(results))
    print(f"report: {path} ({meta['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
