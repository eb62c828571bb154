"""A consumer process: ``python -m bench.worker SYSTEM DSN TASK BATCH [SECONDS]``.

It sets the system up (imports, connection), prints ``ready``, waits for ``go`` on stdin so
that every worker of a measurement starts together, runs the task, and prints one JSON line:
the items it handled and when it handled the first and the last (``time.perf_counter``, the
system-wide monotonic clock on Linux, so the harness can compare processes).
"""

from __future__ import annotations

import json
import sys

from bench.systems import REGISTRY


def main(argv: list[str]) -> int:
    name, dsn, task, batch = argv[0], argv[1], argv[2], int(argv[3])
    seconds = float(argv[4]) if len(argv) > 4 else 0.0
    system = REGISTRY[name](dsn)
    system.depth()  # connect and warm up before the clock starts
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return 1
    tally = system.drain(batch) if task == "drain" else system.cycle(batch, seconds)
    system.close()
    print(json.dumps({"count": tally.count, "first": tally.first, "last": tally.last}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
