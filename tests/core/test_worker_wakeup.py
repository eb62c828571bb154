"""An idle worker wakes when work falls due that no push announces: a delayed item, a retry
whose back-off ended, a lease that expired. Its safety poll and its rescue thread are an hour
away in these tests, so only the due time can wake it; both layouts, both databases."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from dbqueue import Backoff, QueueOptions
from dbqueue.message import Message
from dbqueue.wakeup import PollPolicy
from dbqueue.worker import Consumer, Worker
from dbqueue.worker_queue import ExecutorQueue
from tests.core.ringbed import BACKENDS, ring_bed
from tests.core.test_worker import PATIENCE, make_setup, run_in_thread

#: Nothing but a notification or a due time wakes the worker within the test's patience.
ASLEEP = PollPolicy(first=0.001, busy_max=0.01, linger=0.05, safety=3600)
BACKOFF = Backoff(base=timedelta(milliseconds=800), cap=timedelta(milliseconds=800), jitter=0)


class Bed:
    """A queue of either layout: how the worker binds to it, and how the test pushes and pops
    as another client."""

    def __init__(self, binding: ExecutorQueue, push: Callable[..., int], pop: Callable[..., Any]):
        self.binding, self.push, self.pop = binding, push, pop


@contextmanager
def bed(
    request: pytest.FixtureRequest, backend: str, layout: str, table: str, **options: Any
) -> Iterator[Bed]:
    if layout == "split":
        kind = "pg" if backend == "postgresql" else "sqlite"
        setup = make_setup(
            request, kind, table, QueueOptions(**options), listen=backend == "postgresql"
        )
        q, ex = setup.queue, setup.ex
        yield Bed(setup.binding(), lambda **kw: q.push(ex, {"n": 1}, **kw),
                  lambda **kw: q.pop_batch(ex, 1, **kw))  # fmt: skip
        return
    with ring_bed(backend, request, table, capacity=16, **options) as ring:
        listen = (lambda: psycopg.connect(ring.target)) if backend == "postgresql" else None
        binding = ExecutorQueue(ring.queue, ring.connect, listen=listen)
        q, ex = ring.queue, ring.ex
        yield Bed(binding, lambda **kw: q.push(ex, {"n": 1}, **kw),
                  lambda **kw: q.pop_batch(ex, 1, **kw))  # fmt: skip


LAYOUTS = ["split", "ring"]


def run_until(binding: ExecutorQueue, handle: Callable[[Message], bool]) -> float:
    """Run an idle-prone worker until ``handle`` returns True; when that happened
    (time.time())."""
    done = threading.Event()
    at: list[float] = []

    def consume(m: Message) -> None:
        if handle(m):
            at.append(time.time())
            done.set()

    worker = Worker([Consumer(binding, consume)], poll=ASLEEP, rescue_every=3600)
    finish = run_in_thread(worker)
    try:
        assert done.wait(PATIENCE), "the worker slept past the due time"
    finally:
        finish()
    return at[0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_delayed_item_wakes_an_idle_worker(
    request: pytest.FixtureRequest, backend: str, table_name: str
) -> None:
    with bed(request, backend, "split", table_name) as b:
        due = time.time() + 0.8
        b.push(delay=timedelta(milliseconds=800))
        assert run_until(b.binding, lambda m: True) >= due - 0.05


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_retry_wakes_an_idle_worker_when_its_back_off_ends(
    request: pytest.FixtureRequest, backend: str, layout: str, table_name: str
) -> None:
    with bed(request, backend, layout, table_name, backoff=BACKOFF, max_attempts=3) as b:
        b.push()
        failed_at: list[float] = []

        def handle(m: Message) -> bool:
            if m.attempts == 1:
                failed_at.append(time.time())
                raise ValueError("not yet")
            return True

        handled = run_until(b.binding, handle)
        assert handled >= failed_at[0] + 0.8 - 0.05  # not before its back-off ended


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_an_expired_lease_wakes_an_idle_worker(
    request: pytest.FixtureRequest, backend: str, layout: str, table_name: str
) -> None:
    with bed(request, backend, layout, table_name) as b:
        b.push()
        (dead,) = b.pop(lease=timedelta(milliseconds=800))  # its worker died
        expires = time.time() + 0.8
        handled = run_until(b.binding, lambda m: m.payload == dead.payload)
        assert handled >= expires - 0.05
