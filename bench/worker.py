"""A worker process of the harness: ``python -m bench.worker SYSTEM TASK ARG [SECONDS]``, with
the system's DSN in the environment (``DBQUEUE_BENCH_DSN``: never on a command line, where
``ps`` would show its password).

Tasks: ``drain BATCH``, ``cycle BATCH SECONDS``, ``pairs BATCH SECONDS`` (the cycle with
pushes on one connection and pops on another), ``serve BATCH SECONDS`` (a long-running
consumer recording each message's latency) and ``produce RATE SECONDS`` (stamped messages at
a fixed rate). The process sets the system up (imports, connection), prints ``ready``, waits
for ``go`` on stdin so that every process of a measurement starts together, runs the task and
prints one JSON line. Times are ``time.perf_counter()``: the system-wide monotonic clock on
Linux, so the harness can compare processes.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from bench.env import child_dsn
from bench.systems import REGISTRY
from bench.systems.base import System, Tally, stamp_of, stamped

#: Producers start this long after the consumers, as real workers are up before traffic
#: arrives (a Celery worker takes ~0.5 s to boot; its first messages would wait for it).
WARMUP = 1.0


def produce(system: System, rate: float, seconds: float) -> Tally:
    """Push stamped messages on a fixed schedule (open loop: a late push does not slow the
    next ones down, so a slow system shows its latency instead of hiding it)."""
    time.sleep(WARMUP)
    tally, start, i = Tally(), time.perf_counter(), 0
    while (due := start + i / rate) < start + seconds:
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        system.push_payload(stamped())
        tally.add(1)
        i += 1
    return tally


def run(system: System, task: str, arg: float, seconds: float) -> dict[str, Any]:
    latencies: list[float] = []
    per_second: dict[int, int] = {}
    if task == "drain":
        tally = system.drain(int(arg))
    elif task == "cycle":
        tally = system.cycle(int(arg), seconds)
    elif task == "pairs":
        tally = system.cycle(int(arg), seconds, popper=system.popper())
    elif task == "serve":

        def handle(payload: str) -> None:
            now = time.perf_counter()
            latencies.append(now - stamp_of(payload))
            per_second[int(now)] = per_second.get(int(now), 0) + 1

        tally = system.serve(int(arg), seconds, handle)
    elif task == "produce":
        tally = produce(system, arg, seconds)
    else:
        raise SystemExit(f"unknown task {task!r}")
    out: dict[str, Any] = {"count": tally.count, "first": tally.first, "last": tally.last}
    if tally.compactions:
        out["compactions"] = tally.compactions
    if latencies:
        out["latencies"] = latencies
        out["served_per_second"] = per_second
    return out


def main(argv: list[str]) -> int:
    name, task, arg = argv[0], argv[1], float(argv[2])
    seconds = float(argv[3]) if len(argv) > 3 else 0.0
    system = REGISTRY[name](child_dsn())
    system.depth()  # connect and warm up before the clock starts
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return 1
    out = run(system, task, arg, seconds)
    system.close()
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
