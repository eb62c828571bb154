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
for their flush). The ring's floor runs only its hot statements on its own; the rare paths go
through the queue's own code: a push whose slot is not free (``ring_push_blocked``), and a pop
while claims an earlier pop did not take are held (their push was still in flight), which
must look at their slots, wait for them or give them up (see dbqueue.ring.claims).
"""

from __future__ import annotations

import datetime as dt
import sys
from typing import Any

from bench.systems.base import PAYLOAD
from bench.systems.dbqueue_core import DBQueueCore
from bench.systems.dbqueue_ring import DBQueueRing
from dbqueue import QueueFull
from dbqueue.ring.claims import Claim, now

#: Parameters of the at-least-once pops and acks, as the API binds them outside a transaction.
LEASE = dt.timedelta(seconds=60)
RELAXED = "off"


class FloorMixin:
    """Runs a layout's statements by name on the system's executor."""

    workloads = frozenset({"cycle", "pairs", "bloat"})
    ex: Any
    queue: Any

    def sql(self, name: str, params: dict[str, Any]) -> list[Any]:
        return self.ex.execute(self.queue.statements[name].parts[0], params)  # type: ignore[no-any-return]

    def settle(self, name: str, ids: list[int], attempts: list[int], **extra: Any) -> int:
        """Ack the messages taken (``ids`` with their ``attempts``) with statement ``name``."""
        params = {"ids": ids, "attempts": attempts, "count": len(ids), "commit": RELAXED}
        self.sql(name, params | extra)
        return len(ids)


class SplitSQL(FloorMixin, DBQueueCore):
    """The split layout's push, pop and ack statements, nothing else."""

    name = "sql-split"
    label = "split queue's SQL through the executor alone (Python floor)"
    database = "dbqueue_core"

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
        # split_pop_leased: id, attempts, ...
        return self.settle("split_ack", [r[0] for r in rows], [r[1] for r in rows], strict=False)


class RingSQL(FloorMixin, DBQueueRing):
    """The ring layout's hot push, pop and ack statements; the rare paths through the API."""

    name = "sql-ring"
    label = "ring queue's SQL through the executor alone (Python floor)"
    database = "dbqueue_ring"

    def _blocked(self, rows: list[Any], payload: str) -> None:
        """The rare path, for the messages the hot statement could not land (``rows``: the
        number of each and whether it landed): the queue's own push from those numbers on
        (``ring_push_blocked``, backpressure); a QueueFull is reported on stderr."""
        numbers = [int(number) for number, landed, *_ in rows if not landed]
        if numbers:
            try:
                self.queue._push_all(self.ex, [[payload]] * len(numbers), numbers)
            except QueueFull as exc:
                print(f"{self.name}: {exc}", file=sys.stderr, flush=True)

    def push_payload(self, payload: str) -> None:
        params = {"capacity": self.capacity, "p0": payload, "p": None}
        self._blocked(self.sql("ring_push", params), payload)

    def push_batch(self, n: int, batch: int) -> None:
        for start in range(0, n, batch):
            size = min(batch, n - start)
            params = {"capacity": self.capacity, "ps": [None] * size, "c0": [PAYLOAD] * size}
            self._blocked(self.sql("ring_push_many", params), PAYLOAD)

    def take(self, batch: int) -> int:
        queue = self.queue
        if queue.pending_claims:
            # Claims an earlier pop did not take (their push was in flight): the API's pop,
            # which looks at their slots, waits for them or gives them up (dbqueue.ring.claims).
            taken = [(m.id, m.attempts) for m in queue.pop_batch(self.ex, batch, lease=LEASE)]
        else:
            params = {"capacity": self.capacity, "n": batch, "k": batch, "lease": LEASE,
                      "commit": RELAXED}  # fmt: skip
            rows = self.sql("ring_pop_leased", params)
            # ring_pop_leased: number, taken, slot_seq, slot_state, attempts, ...
            clock = now()
            missed = [Claim(r[0], clock) for r in rows if not r[1]]
            taken = [(r[0], r[4]) for r in rows if r[1]]
            if missed:
                # As the API's pop does at once: look at the missed claims' slots, and take
                # new numbers for the rest of the batch.
                queue._claims.give_back(missed)
                more = queue.pop_batch(self.ex, batch - len(taken), lease=LEASE)
                taken += [(m.id, m.attempts) for m in more]
        ids, attempts = [t[0] for t in taken], [t[1] for t in taken]
        return self.settle("ring_ack", ids, attempts, capacity=self.capacity)
