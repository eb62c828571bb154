"""procrastinate 3.10 with its psycopg connector, driven through its documented API:
``task.defer()`` to
push one job, ``task.batch_defer()`` for a batch, and ``run_worker_async(concurrency=1)`` to
consume, with the default ``delete_jobs="never"`` (finished jobs stay, as ``succeeded``).

procrastinate is imported inside the methods, so importing this module costs nothing (and
fails nothing) where procrastinate is absent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg

from bench.systems.base import PAYLOAD, System, Tally

if TYPE_CHECKING:
    from procrastinate.types import JSONValue

TASK_NAME = "bench_noop"


class Procrastinate(System):
    name = "procrastinate"
    label = "procrastinate 3.10 (PsycopgConnector)"
    # No cycle: procrastinate has no pop-a-batch-and-acknowledge call; its consumer is the
    # worker, measured by drain and steady.
    workloads = frozenset({"push_single", "push_batch", "drain", "steady", "longtx"})
    # The worker fetches one job per round trip (procrastinate_fetch_job_v2 ... LIMIT 1), runs
    # it, then records its end (finish_job) before fetching the next: there is no batch size.
    drain_batches = (1,)
    # ~200 jobs/s with one worker (measured here): 3,000 jobs take ~15 s a run, so a full-run
    # figure (the median of 3 runs) stays under a minute. --quick drains 300.
    drain_backlog = 3_000
    tables = ("procrastinate_jobs", "procrastinate_events")

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        from procrastinate import App, PsycopgConnector

        self.app = App(connector=PsycopgConnector(conninfo=dsn))
        #: What the task does with each job's payload (set by drain and serve).
        self.on_job: Callable[[str], None] = lambda payload: None

        # An async task: the worker runs it on its event loop. A sync one would be handed to a
        # thread for every job (procrastinate's sync_to_async), which a no-op need not pay.
        @self.app.task(name=TASK_NAME)
        async def noop(payload: str) -> None:
            self.on_job(payload)

        self.task = noop
        self._opened = False

    def _open(self) -> None:
        """Open the synchronous pool the producer side (defer, schema) runs on."""
        if not self._opened:
            self.app.open()
            self._opened = True

    def install(self) -> None:
        # What `procrastinate schema --apply` runs.
        self._open()
        self.app.schema_manager.apply_schema()

    def reset(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(
                "TRUNCATE procrastinate_jobs, procrastinate_events, procrastinate_periodic_defers, "
                "procrastinate_workers"
            )

    def close(self) -> None:
        if self._opened:
            self.app.close()
            self._opened = False

    def push_single(self, n: int) -> None:
        self._open()
        defer = self.task.defer
        for _ in range(n):
            defer(payload=PAYLOAD)  # one pooled connection, one transaction each

    def push_batch(self, n: int, batch: int) -> None:
        self._open()
        kwargs: dict[str, JSONValue] = {"payload": PAYLOAD}
        for start in range(0, n, batch):
            self.task.batch_defer(*[kwargs] * min(batch, n - start))

    def depth(self) -> int:
        # delete_jobs="never": finished jobs stay in the table, so count the pending ones only.
        with psycopg.connect(self.dsn) as conn:
            row = conn.execute(
                "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"
            ).fetchone()
            return int(row[0])  # type: ignore[index]

    def push_payload(self, payload: str) -> None:
        self._open()
        self.task.defer(payload=payload)

    # -- consumer side ---------------------------------------------------------------------------

    def drain(self, batch: int) -> Tally:
        """The worker with ``wait=False``: it stops once no job is left. Counted when each task
        runs; the worker then records the job's end before fetching the next, so the last
        count precedes one finish_job round trip."""
        tally = Tally()
        self.on_job = lambda payload: tally.add(1)

        async def drain() -> None:
            async with self.app.open_async():
                await self.app.run_worker_async(concurrency=1, wait=False)

        asyncio.run(drain())
        return tally

    def serve(self, batch: int, seconds: float, handle: Callable[[str], None]) -> Tally:
        """The worker with ``wait=True`` (LISTEN/NOTIFY wakes it, polling every 5 s as a
        fallback), stopped after ``seconds`` by cancelling its task: procrastinate's documented
        way to stop a worker run with run_worker_async, which finishes the job in hand."""
        tally = Tally()

        def on_job(payload: str) -> None:
            handle(payload)
            tally.add(1)

        self.on_job = on_job

        async def serve() -> None:
            async with self.app.open_async():
                worker: asyncio.Task[Any] = asyncio.create_task(
                    self.app.run_worker_async(concurrency=1, wait=True)
                )
                await asyncio.sleep(seconds)
                worker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await worker

        asyncio.run(serve())
        return tally
