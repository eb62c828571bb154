"""dbqueue's split queue through SQLAlchemy's asyncio API (``apush``, ``apop_batch``, ``aack``
on an ``AsyncSession``), as an async web application drives it: on psycopg's async mode and on
asyncpg, the driver most FastAPI applications use. Each process runs its operations on an
event loop of its own (one ``asyncio.Runner``)."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from bench.systems.base import PAYLOAD, System, Tally
from bench.systems.dbqueue_sa import BenchSAJob, DBQueueSA, sqlalchemy_url


class DBQueueSAAsync(System):
    """``BenchSAJob.queue``'s a-methods on an AsyncSession over psycopg (async)."""

    name = "dbqueue-sa-async"
    label = "dbqueue split queue, SQLAlchemy AsyncSession (psycopg)"
    workloads = frozenset({"push_single", "push_batch", "drain", "cycle", "pairs"})
    tables = DBQueueSA.tables
    #: The SQLAlchemy driver name of the URL.
    driver: ClassVar[str] = "psycopg"

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.runner = asyncio.Runner()
        url = sqlalchemy_url(dsn).set(drivername=f"postgresql+{self.driver}")
        self.engine = create_async_engine(url, pool_size=1)
        self.session = AsyncSession(self.engine)
        self.queue = BenchSAJob.queue
        self._sync: DBQueueSA | None = None

    @property
    def sync(self) -> DBQueueSA:
        """The sync system on the same database: tables, reset and depth."""
        if self._sync is None:
            self._sync = DBQueueSA(self.dsn)
        return self._sync

    def _run(self, coroutine: Any) -> Any:
        return self.runner.run(coroutine)

    def install(self) -> None:
        self.sync.install()

    def reset(self) -> None:
        self.sync.reset()

    def close(self) -> None:
        self._run(self.session.close())
        self._run(self.engine.dispose())
        if self._sync is not None:
            self._sync.close()
            self._sync = None

    def depth(self) -> int:
        return self.sync.depth()

    async def _push(self, n: int, payload: str = PAYLOAD) -> None:
        for _ in range(n):
            await self.queue.apush(self.session, payload=payload)
            await self.session.commit()

    def push_single(self, n: int) -> None:
        self._run(self._push(n))

    async def _push_batches(self, n: int, batch: int) -> None:
        rows: list[dict[str, Any]] = [{"payload": PAYLOAD}] * batch
        for start in range(0, n, batch):
            await self.queue.apush_many(self.session, rows[: min(batch, n - start)])
            await self.session.commit()

    def push_batch(self, n: int, batch: int) -> None:
        self._run(self._push_batches(n, batch))

    def push_payload(self, payload: str) -> None:
        self._run(self._push(1, payload))

    async def _take(self, batch: int) -> int:
        items = await self.queue.apop_batch(self.session, batch)
        await self.session.commit()  # the leases, as a worker commits them before handling
        if items:
            await self.queue.aack(self.session, items)
            await self.session.commit()
        return len(items)

    def take(self, batch: int) -> int:
        return int(self._run(self._take(batch)))

    def drain(self, batch: int) -> Tally:
        tally = Tally()
        while taken := self.take(batch):
            tally.add(taken)
        return tally


class DBQueueSAAsyncpg(DBQueueSAAsync):
    """The same on asyncpg (``postgresql+asyncpg://``: the core's SQL with numbered
    parameters)."""

    name = "dbqueue-sa-asyncpg"
    label = "dbqueue split queue, SQLAlchemy AsyncSession (asyncpg)"
    driver = "asyncpg"
