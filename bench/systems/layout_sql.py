"""The Python floor of each layout: its own statements (the SQL dbqueue's API sends, as
``queue.statements`` renders it) run straight through the psycopg executor
(:class:`~dbqueue.drivers.psycopg.PsycopgExecutor`: a reused cursor, prepared, binary), with
none of the layout's Python (parameters, claims, payload codec, Message objects).

Between pgbench running the same statements (no client cost at all, bench/ring_pgbench.py)
and dbqueue's API, these systems show what any Python client of these statements pays: the
driver's own work per call (building parameters, sending, reading rows), on the same 2 cores as
the server. A ratio the API misses but the floor reaches is our Python's to win; one the
floor misses too is the price of a Python client on this machine.

Both settle as dbqueue's worker does (at least once, non-strict acks, commits that do not wait
for their flush). The ring's floor keeps what the protocol needs of its popper and nothing
more: the claims a pop did not take are shown to the next pop (``ring_pop_leased_held``), as
the pgbench reference does; a push that does not land is not retried (each ring has twice the
slots its workload keeps in flight, so none should; one that does is reported on stderr).
"""

from __future__ import annotations

import datetime as dt
import sys
from typing import Any

from bench.systems.base import PAYLOAD
from bench.systems.dbqueue_core import DBQueueCore
from bench.systems.dbqueue_ring import DBQueueRing

#: Parameters of the at-least-once pops and acks, as the API binds them outside a transaction.
LEASE = dt.timedelta(seconds=60)
RELAXED = "off"


class FloorMixin:
    """Runs a layout's statement by name on the system's executor."""

    ex: Any
    queue: Any

    def sql(self, name: str, params: dict[str, Any]) -> list[Any]:
        return self.ex.execute(self.queue.statements[name].parts[0], params)  # type: ignore[no-any-return]


class SplitSQL(FloorMixin, DBQueueCore):
    """The split layout's push, pop and ack statements, nothing else."""

    name = "sql-split"
    label = "split queue's SQL through the executor alone (Python floor)"
    database = "dbqueue_core"
    workloads = frozenset({"cycle", "pairs", "bloat"})

    def push_payload(self, payload: str) -> None:
        self.sql(
            "split_push",
            {"p0": payload, "priority": 0, "run_at": None, "delay": dt.timedelta(0)},
        )

    def push_batch(self, n: int, batch: int) -> None:
        for start in range(0, n, batch):
            size = min(batch, n - start)
            params = {"c0": [PAYLOAD] * size, "count": size, "priority": 0, "run_at": None,
                      "delay": dt.timedelta(0)}  # fmt: skip
            self.sql("split_push_many", params)

    def take(self, batch: int) -> int:
        rows = self.sql("split_pop_leased", {"n": batch, "lease": LEASE, "commit": RELAXED})
        ids = [r[0] for r in rows]
        attempts = [r[1] for r in rows]  # split_pop_leased: id, attempts, ...
        self.sql(
            "split_ack",
            {"ids": ids, "attempts": attempts, "count": len(ids), "strict": False,
             "commit": RELAXED},
        )  # fmt: skip
        return len(ids)


class RingSQL(FloorMixin, DBQueueRing):
    """The ring layout's push, pop and ack statements, and the claims it must keep."""

    name = "sql-ring"
    label = "ring queue's SQL through the executor alone (Python floor)"
    database = "dbqueue_ring"
    workloads = frozenset({"cycle", "pairs", "bloat"})

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self._held: list[int] = []

    def reset(self) -> None:
        super().reset()
        self._held = []

    def _landed(self, rows: list[Any]) -> None:
        """Report a push that did not land (its number stays a claim no push will fill, and
        the popper that holds it stalls: the figure shows it), without stopping the run."""
        if not all(r[1] for r in rows):
            print(f"{self.name}: a push met a busy slot in {self.capacity} slots",
                  file=sys.stderr, flush=True)  # fmt: skip

    def push_payload(self, payload: str) -> None:
        self._landed(self.sql("ring_push", {"capacity": self.capacity, "p0": payload, "p": None}))

    def push_batch(self, n: int, batch: int) -> None:
        for start in range(0, n, batch):
            size = min(batch, n - start)
            params = {"capacity": self.capacity, "ps": [None] * size, "c0": [PAYLOAD] * size}
            self._landed(self.sql("ring_push_many", params))

    def take(self, batch: int) -> int:
        params: dict[str, Any] = {"capacity": self.capacity, "n": batch, "lease": LEASE,
                                  "commit": RELAXED}  # fmt: skip
        if self._held:
            params |= {"k": max(0, batch - len(self._held)), "held": self._held}
            rows = self.sql("ring_pop_leased_held", params)
        else:
            rows = self.sql("ring_pop_leased", params | {"k": batch})
        # ring_pop_leased: number, taken, slot_seq, slot_state, attempts, ...
        self._held = [r[0] for r in rows if not r[1]]
        ids = [r[0] for r in rows if r[1]]
        attempts = [r[4] for r in rows if r[1]]
        params = {"capacity": self.capacity, "ids": ids, "attempts": attempts,
                  "count": len(ids), "commit": RELAXED}  # fmt: skip
        self.sql("ring_ack", params)
        return len(ids)
