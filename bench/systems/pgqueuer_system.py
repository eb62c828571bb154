"""pgqueuer 1.6 through its asyncio API and the psycopg driver, driven through its documented API:
``Queries.enqueue`` to push (scalars for one job, lists for a batch) and a ``QueueManager``
whose one entrypoint is a no-op handler to consume (default batch size 10).

The driver runs the manager's queries and its LISTEN on one connection, and psycopg's
``notifies()`` holds the connection's lock until a notification comes or its 1 s timeout ends:
a query issued while no notification is on its way waits up to a second. That is pgqueuer's
own behaviour with this driver, left as it is. It shows as one ~1 s pause about 20 jobs into
every drain (a large share of a --quick drain of 5,000, a small one of a full run's 50,000) and
as ~4 s between the last job and ``run`` returning (probe queries after the drain, then the
listener's exit), which costs wall time but no figure: rates run from the first handled job to
the last.

pgqueuer is imported inside the methods, so importing this module costs nothing (and fails
nothing) where pgqueuer is absent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import psycopg

from bench.systems.base import PAYLOAD, System, Tally

if TYPE_CHECKING:
    from pgqueuer import QueueManager
    from pgqueuer.queries import Queries

ENTRYPOINT = "bench"
#: pgqueuer's payload column is bytea: the 300-character string, encoded once.
PAYLOAD_BYTES = PAYLOAD.encode()


class PgQueuer(System):
    name = "pgqueuer"
    label = "pgqueuer 1.6 (PsycopgDriver)"
    # No cycle: pgqueuer has no pop-a-batch-and-acknowledge call; its consumer is the
    # QueueManager loop, measured by drain and steady.
    workloads = frozenset({"push_single", "push_batch", "drain", "steady", "longtx"})
    # QueueManager.run(batch_size=...) takes any size, but the report compares our drain with
    # pgqueuer's default of 10, and --quick keeps the last size only.
    drain_batches = (10,)
    tables = ("pgqueuer", "pgqueuer_log")

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        import pgqueuer  # noqa: F401 - import here, before a worker prints ready
        from pgqueuer.domain.settings import db_settings

        self.queue_table = db_settings().queue_table
        # One event loop for the system's life, so the producer's connection outlives a call.
        self._runner = asyncio.Runner()
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._queries: Queries | None = None

    def _run[T](self, coro: Coroutine[Any, Any, T]) -> T:
        return self._runner.run(coro)

    async def _connect(self) -> tuple[psycopg.AsyncConnection[Any], Queries]:
        """A connection (the driver wants autocommit) and pgqueuer's queries over it; the
        driver never closes the connection, its owner does."""
        from pgqueuer import PsycopgDriver
        from pgqueuer.queries import Queries

        conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
        return conn, Queries(PsycopgDriver(conn))

    async def _producer(self) -> Queries:
        if self._queries is None:
            self._conn, self._queries = await self._connect()
        return self._queries

    def install(self) -> None:
        # What `pgq install` runs: the schema's tables, types, indexes, trigger and function.
        async def install() -> None:
            await (await self._producer()).install()

        self._run(install())

    def reset(self) -> None:
        async def reset() -> None:
            q = await self._producer()
            await q.clear_queue()  # TRUNCATE of each table
            await q.clear_queue_log()
            await q.clear_statistics_log()

        self._run(reset())

    def close(self) -> None:
        async def close() -> None:
            if self._conn is not None:
                await self._conn.close()
                self._conn = self._queries = None

        self._run(close())
        self._runner.close()
        self._runner = asyncio.Runner()  # lazy: no event loop until it is used again

    def push_single(self, n: int) -> None:
        async def push() -> None:
            enqueue = (await self._producer()).enqueue
            for _ in range(n):
                await enqueue(ENTRYPOINT, PAYLOAD_BYTES)  # autocommit: one transaction each

        self._run(push())

    def push_batch(self, n: int, batch: int) -> None:
        async def push() -> None:
            enqueue = (await self._producer()).enqueue
            for start in range(0, n, batch):
                size = min(batch, n - start)
                await enqueue([ENTRYPOINT] * size, [PAYLOAD_BYTES] * size, [0] * size)

        self._run(push())

    def depth(self) -> int:
        with psycopg.connect(self.dsn) as conn:
            row = conn.execute(
                f"SELECT count(*) FROM {self.queue_table} WHERE status IN ('queued', 'picked')"
            ).fetchone()
            return int(row[0])  # type: ignore[index]

    def push_payload(self, payload: str) -> None:
        async def push() -> None:
            await (await self._producer()).enqueue(ENTRYPOINT, payload.encode())

        self._run(push())

    # -- consumer side ---------------------------------------------------------------------------

    async def _consume(
        self,
        handler: Callable[[Any], Coroutine[Any, Any, None]],
        run: Callable[[QueueManager], Any],
    ) -> None:
        """Run a QueueManager on its own connection, with ``handler`` as its one entrypoint."""
        from pgqueuer import QueueManager

        conn, queries = await self._connect()
        try:
            qm = QueueManager(queries)
            qm.entrypoint(ENTRYPOINT)(handler)
            await run(qm)
        finally:
            await conn.close()

    def drain(self, batch: int) -> Tally:
        """Run the manager in pgqueuer's own drain mode, which stops once no job is queued and
        the jobs in hand are done. Counted when each handler runs: the manager acknowledges
        (deletes and logs) finished jobs in buffered batches of ``batch`` and flushes the rest
        before ``run`` returns, so at most one flush falls after the last count."""
        from pgqueuer.types import QueueExecutionMode

        tally = Tally()

        async def handler(job: Any) -> None:
            tally.add(1)  # the no-op handler

        async def drain(qm: QueueManager) -> None:
            await qm.run(batch_size=batch, mode=QueueExecutionMode.drain)

        self._run(self._consume(handler, drain))
        return tally

    def serve(self, batch: int, seconds: float, handle: Callable[[str], None]) -> Tally:
        """The manager in its default continuous mode (LISTEN/NOTIFY wakes it), stopped after
        ``seconds`` through its ``shutdown`` event, as pgqueuer's own signal handler does."""
        tally = Tally()

        async def handler(job: Any) -> None:
            handle(job.payload.decode())
            tally.add(1)

        async def serve(qm: QueueManager) -> None:
            stop = asyncio.get_running_loop().call_later(seconds, qm.shutdown.set)
            try:
                await qm.run(batch_size=batch)
            finally:
                stop.cancel()

        self._run(self._consume(handler, serve))
        return tally
