"""dbqueue's split queue through the Django manager's async twins (``apush``, ``apush_many``,
``apop_batch``, ``aack``), as an async view awaits them: each call hops from the event loop to
the thread-sensitive executor's thread, runs the sync operation there, and hops back.

Each system runs its coroutines on an event loop of its own (one ``asyncio.Runner``) inside
one ``ThreadSensitiveContext`` entered for its lifetime: one thread and one connection, what
one ASGI request has. (A real request opens its connection when it starts and closes it when
it ends; that cost is Django's, the same for every view, and is left out.)"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from contextlib import AsyncExitStack
from typing import Any

from bench.systems.base import PAYLOAD, Tally
from bench.systems.dbqueue_django import DBQueueDjango


class DBQueueDjangoAsync(DBQueueDjango):
    """``BenchJob.queue``'s async twins, awaited on an event loop."""

    name = "dbqueue-django-async"
    label = "dbqueue split queue, Django manager's async twins"
    workloads = frozenset({"push_single", "push_batch", "drain", "cycle", "pairs"})

    def __init__(self, dsn: str, alias: str | None = None) -> None:
        super().__init__(dsn, alias)
        from asgiref.sync import ThreadSensitiveContext

        self.runner = asyncio.Runner()
        # Entered once: the runner runs every coroutine in one contextvars context, so each
        # later call finds it, and its one thread, there.
        self.context = AsyncExitStack()
        self._run(self.context.enter_async_context(ThreadSensitiveContext()))

    def _run[R](self, coroutine: Coroutine[Any, Any, R]) -> R:
        return self.runner.run(coroutine)

    def close(self) -> None:
        from asgiref.sync import sync_to_async
        from django.db import connections

        try:
            self._run(sync_to_async(connections.close_all)())  # the context's thread's
            self._run(self.context.aclose())
        finally:
            self.runner.close()
            super().close()

    async def _push(self, n: int, payload: str) -> None:
        push = self.queue.apush
        for _ in range(n):
            await push(payload=payload)

    def push_single(self, n: int) -> None:
        self._run(self._push(n, PAYLOAD))

    async def _push_batches(self, n: int, batch: int) -> None:
        rows: list[dict[str, Any]] = [{"payload": PAYLOAD}] * batch
        for start in range(0, n, batch):
            await self.queue.apush_many(rows[: min(batch, n - start)], batch_size=batch)

    def push_batch(self, n: int, batch: int) -> None:
        self._run(self._push_batches(n, batch))

    def push_payload(self, payload: str) -> None:
        self._run(self._push(1, payload))

    async def _take(self, batch: int) -> int:
        items = await self.queue.apop_batch(batch)
        if items:
            await self.queue.aack(items)
        return len(items)

    def take(self, batch: int) -> int:
        return self._run(self._take(batch))

    def drain(self, batch: int) -> Tally:
        tally = Tally()
        while taken := self.take(batch):
            tally.add(taken)
        return tally
