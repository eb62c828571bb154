"""The workloads. Each returns Measurements; each figure is the median of ``env.repeat``
runs (``env.process_repeat`` for workloads that start worker processes).

Sizes are the full run's; ``--quick`` has its own small ones (``BenchEnv.size``).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from bench.env import BenchEnv, child_environ
from bench.measure import Measurement
from bench.systems.base import System
from bench.worker import WARMUP

ROOT = Path(__file__).resolve().parent.parent
Runner = Callable[[BenchEnv, System, int], list[Measurement]]


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def push_single(env: BenchEnv, system: System, repeat: int) -> list[Measurement]:
    """One message per transaction, one client."""
    n = env.size(20_000, 500)
    system.expect(n)
    runs = []
    for _ in range(env.repeat):
        system.reset()
        runs.append(n / _timed(lambda: system.push_single(n)))
    return [Measurement(system.name, "push_single", {"clients": 1}, runs, extra={"messages": n})]


def push_batch(env: BenchEnv, system: System, repeat: int) -> list[Measurement]:
    """Batches of 100 and 1,000 messages per statement (or per API call), one client."""
    out = []
    for batch in (100, 1000):
        n = env.size(200_000, 2_000)
        system.expect(n)
        runs = []
        for _ in range(env.repeat):
            system.reset()
            runs.append(n / _timed(lambda n=n, b=batch: system.push_batch(n, b)))  # type: ignore[misc]
        out.append(
            Measurement(system.name, "push_batch", {"batch": batch}, runs, extra={"messages": n})
        )
    return out


Spec = tuple[str, float, float, int]  # task, argument, seconds, how many processes


Tallies = tuple[list[dict[str, Any]], list[float]]


def _workers(
    env: BenchEnv, system: System, task: str, count: int, batch: int, seconds: float = 0
) -> Tallies:
    """Start ``count`` worker processes for ``task``; see :func:`_processes`."""
    return _processes(system, [(task, batch, seconds, count)])


def _processes(system: System, specs: list[Spec]) -> Tallies:
    """Start the worker processes of ``specs`` together; return their JSON results (in spec
    order) and the seconds each took from spawn to ready (interpreter, imports, connection)."""
    base = [sys.executable, "-m", "bench.worker", system.name]
    spawned = time.perf_counter()
    procs = [
        subprocess.Popen(
            [*base, task, str(arg), str(seconds)],
            cwd=ROOT,
            env=child_environ(system.dsn),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for task, arg, seconds, count in specs
        for _ in range(count)
    ]
    startups = []
    for p in procs:
        line = p.stdout.readline().strip()  # type: ignore[union-attr]
        if line != "ready":
            raise RuntimeError(f"{system.name} worker did not start: {line!r}")
        startups.append(time.perf_counter() - spawned)
    for p in procs:
        p.stdin.write("go\n")  # type: ignore[union-attr]
        p.stdin.flush()  # type: ignore[union-attr]
    tallies = []
    for p in procs:
        out, _ = p.communicate(timeout=3600)
        if p.returncode != 0:
            raise RuntimeError(f"{system.name} worker failed with exit code {p.returncode}")
        tallies.append(json.loads(out.strip().splitlines()[-1]))
    return tallies, startups


def _rate(tallies: list[dict[str, float]]) -> tuple[int, float]:
    active = [t for t in tallies if t["count"]]
    total = sum(int(t["count"]) for t in active)
    span = max(t["last"] for t in active) - min(t["first"] for t in active) if active else 0
    return total, (total / span if span > 0 else float("nan"))


def _analyze(system: System) -> None:
    """Give the planner statistics for the fresh backlog, as autovacuum's auto-analyze would
    have done in any deployment by then (and some servers run with autovacuum off): without
    them some systems' dequeue sorts the whole backlog on every call."""
    with psycopg.connect(system.dsn, autocommit=True) as conn:
        conn.execute("ANALYZE")


def drain(env: BenchEnv, system: System, repeat: int) -> list[Measurement]:
    """A backlog consumed with a no-op handler by 1 and 2 worker processes: rate from the
    first handled item to the last (worker start-up is reported separately)."""
    out = []
    # --quick keeps the largest batch only: the full run has every batch size.
    batches = system.drain_batches[-1:] if env.quick else system.drain_batches
    for workers in (1, 2):
        for batch in batches:
            backlog = system.drain_backlog if batch > 1 else min(system.drain_backlog, 10_000)
            # A drain of fewer than five batches would time a single fetch.
            n = max(env.size(backlog, max(100, min(2_000, backlog // 10))), 5 * batch)
            runs, startups = [], []
            system.expect(n)
            for _ in range(env.process_repeat):
                system.reset()
                system.fill(n)
                _analyze(system)
                tallies, started = _workers(env, system, "drain", workers, batch)
                total, rate = _rate(tallies)
                left = system.depth()
                if total != n or left:
                    raise RuntimeError(f"{system.name}: drained {total} of {n}, {left} left")
                runs.append(rate)
                startups.extend(started)
            params = {"workers": workers, "batch": batch}
            extra = {"messages": n, "startup_s": round(max(startups), 3)}
            out.append(Measurement(system.name, "drain", params, runs, extra=extra))
    return out


def _cycle_runs(
    env: BenchEnv, system: System, task: str, count: int, batch: int, seconds: float
) -> list[float]:
    """Messages per second taken by ``count`` processes cycling batches of ``batch`` for
    ``seconds`` (``task``: cycle or pairs), one figure per repetition from a fresh queue."""
    system.expect(count * batch)
    runs = []
    for _ in range(env.process_repeat):
        system.reset()
        tallies, _ = _workers(env, system, task, count, batch, seconds)
        runs.append(_rate(tallies)[1])
    return runs


def cycle(env: BenchEnv, system: System, repeat: int) -> list[Measurement]:
    """End to end: each worker pushes a batch of 100, pops it and acknowledges it, again and
    again (push_many + pop_batch + ack through the Python API)."""
    out = []
    seconds = 1.0 if env.quick else 5.0
    for workers in (1, 2):
        runs = _cycle_runs(env, system, "cycle", workers, 100, seconds)
        params = {"workers": workers, "batch": 100}
        out.append(Measurement(system.name, "cycle", params, runs, extra={"seconds": seconds}))
    return out


#: Client pairs, message batches and synchronous_commit settings of the pairs workload.
PAIRS = (1, 2, 4)
PAIR_BATCHES = (1, 100)
SYNC_COMMIT = ("on", "off")


@contextmanager
def synchronous_commit(env: BenchEnv, system: System, value: str) -> Iterator[None]:
    """New connections to the system's database (the worker processes') run with
    synchronous_commit ``value``; the run's own setting is restored afterwards."""
    env.set_synchronous_commit(system.dsn, value == "on")
    try:
        yield
    finally:
        env.set_synchronous_commit(system.dsn, env.sync_commit)


def pairs(env: BenchEnv, system: System, repeat: int) -> list[Measurement]:
    """Client pairs, each a pusher and a popper connection in one process: push a message (or
    a batch of 100), pop and acknowledge, again and again, with 1, 2 and 4 pairs and
    synchronous_commit on and off (whatever the run's own setting)."""
    seconds = env.pair_seconds or (1.5 if env.quick else 5.0)
    return run_pairs(env, system, env.pair_counts or PAIRS, PAIR_BATCHES, SYNC_COMMIT, seconds)


def run_pairs(
    env: BenchEnv,
    system: System,
    counts: tuple[int, ...],
    batches: tuple[int, ...],
    syncs: tuple[str, ...],
    seconds: float,
) -> list[Measurement]:
    """The pairs workload for the given pair counts, batch sizes and synchronous_commit values
    (bench/ring_storage.py runs a part of it)."""
    out = []
    for sync in syncs:
        with synchronous_commit(env, system, sync):
            for batch in batches:
                for count in counts:
                    runs = _cycle_runs(env, system, "pairs", count, batch, seconds)
                    params = {"pairs": count, "batch": batch, "sync_commit": sync}
                    extra = {"seconds": seconds}
                    out.append(Measurement(system.name, "pairs", params, runs, extra=extra))
    return out


STEADY_RATE = 200.0  # offered messages per second, in total
STEADY_PRODUCERS = STEADY_CONSUMERS = 2


@dataclass
class SteadyRun:
    """One steady-state run: sorted latencies (s), messages pushed, client CPU seconds, and
    the messages served in each second of the system-wide monotonic clock."""

    latencies: list[float]
    pushed: int
    client_cpu: float
    served_per_second: dict[int, int] = field(default_factory=dict)
    #: How long each compaction the consumers ran took (s), in no particular order.
    compactions: list[float] = field(default_factory=list)

    def percentile(self, q: float) -> float:
        return self.latencies[min(len(self.latencies) - 1, int(len(self.latencies) * q))]


def run_steady(
    env: BenchEnv, system: System, rate: float, seconds: float, *, note: bool = True
) -> SteadyRun:
    """P paced producers and C long-running consumers (which outlive the producers a little
    to serve what is left); returns what the consumers measured. ``note``: say in the report
    when they did not keep up."""
    cpu = _children_cpu()
    tail = 1.0 if env.quick else 2.0
    specs: list[Spec] = [
        ("serve", 10, WARMUP + seconds + tail, STEADY_CONSUMERS),
        ("produce", rate / STEADY_PRODUCERS, seconds, STEADY_PRODUCERS),
    ]
    results, _ = _processes(system, specs)
    pushed = sum(int(r["count"]) for r in results[STEADY_CONSUMERS:])
    latencies = sorted(x for r in results[:STEADY_CONSUMERS] for x in r.get("latencies", []))
    per_second: dict[int, int] = {}
    for r in results[:STEADY_CONSUMERS]:
        for second, count in r.get("served_per_second", {}).items():
            per_second[int(second)] = per_second.get(int(second), 0) + count
    if note and len(latencies) < pushed:
        env.notes.append(
            f"{system.name}: served {len(latencies)} of {pushed} messages pushed at "
            f"{rate:.0f} msg/s within {seconds + tail:.0f} s: it cannot keep up with that rate"
        )
    compactions = [x for r in results[:STEADY_CONSUMERS] for x in r.get("compactions", [])]
    return SteadyRun(latencies, pushed, _children_cpu() - cpu, per_second, compactions)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def steady(env: BenchEnv, system: System, repeat: int) -> list[Measurement]:
    """Steady state at a fixed offered rate: latency from push to handler start (p50, p99,
    max) and the rate actually served."""
    seconds = 1.5 if env.quick else 20.0
    p50s, p99s, maxes, rates, last = [], [], [], [], SteadyRun([], 0, 0)
    system.expect(int(STEADY_RATE * seconds))  # all of it, should the consumers stall
    for _ in range(env.process_repeat):
        system.reset()
        run = run_steady(env, system, STEADY_RATE, seconds)
        if not run.latencies:
            continue
        p50s.append(run.percentile(0.5) * 1000)
        p99s.append(run.percentile(0.99) * 1000)
        maxes.append(run.latencies[-1] * 1000)
        rates.append(len(run.latencies) / seconds)
        last = run
    params = {"producers": STEADY_PRODUCERS, "consumers": STEADY_CONSUMERS, "rate": STEADY_RATE}
    extra = {"seconds": seconds}
    return [
        Measurement(system.name, "latency_p50", params, p50s, unit="ms", extra=extra),
        Measurement(system.name, "latency_p99", params, p99s, unit="ms"),
        Measurement(system.name, "latency_max", params, maxes, unit="ms"),
        Measurement(
            system.name, "steady_throughput", params, rates, extra={"cdf": _cdf(last.latencies)}
        ),
    ]


def _cdf(latencies: list[float], points: int = 200) -> list[list[float]]:
    """A thinned CDF of the last repetition: [latency ms, fraction], for the chart."""
    if not latencies:
        return []
    step = max(1, len(latencies) // points)
    rows = [[x * 1000, (i + 1) / len(latencies)] for i, x in enumerate(latencies)][::step]
    return [*rows, [latencies[-1] * 1000, 1.0]]


#: The short workloads; bench.catalog adds the soaks.
WORKLOADS: dict[str, Runner] = {
    "push_single": push_single,
    "push_batch": push_batch,
    "drain": drain,
    "cycle": cycle,
    "pairs": pairs,
    "steady": steady,
}
