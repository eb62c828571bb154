"""Real concurrency: threads with their own connections. Every item is delivered exactly once
when acked, none is lost, and two poppers never receive the same item."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from tests.conformance.fronts import Front

pytestmark = pytest.mark.slow


def _run_threads(count: int, target: Callable[[Front], None], front: Front) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        clone = front.clone()
        try:
            target(clone)
        except BaseException as exc:  # reported in the main thread
            errors.append(exc)
        finally:
            clone.close()

    threads = [threading.Thread(target=run) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a worker thread hung"
    assert not errors, errors


def test_eight_poppers_drain_20000_items_exactly_once(front: Front) -> None:
    total = min(20_000, front.capacity or 20_000)  # a ring holds at most its capacity
    batch = min(2_000, total)
    ids = front.push_many([{"name": str(i), "n": i} for i in range(total)], batch_size=batch)
    seen: Counter[int] = Counter()
    lock = threading.Lock()

    def popper(f: Front) -> None:
        while batch := f.pop_batch(100):
            with lock:
                seen.update(i.id for i in batch)
            assert len(f.ack(batch)) == len(batch)

    _run_threads(8, popper, front)
    assert len(seen) == total and set(seen) == set(ids)
    assert max(seen.values()) == 1
    assert front.counts() == (0, 0)


def _fits(front: Front, producers: int, per_producer: int, step: int) -> int:
    """``per_producer``, or less on a SQLite ring, so that the pushes fit in the ring: a push
    in a transaction (every push through a Session) holds SQLite's only write lock, which the
    poppers need, so it cannot wait for room and raises QueueFull at once (tested in
    tests/core/test_ring.py); backpressure is tested in tests/core/test_ring_stuck.py."""
    if front.ring and front.backend == "sqlite" and front.capacity is not None:
        return min(per_producer, front.capacity // producers // step * step)
    return per_producer


def test_producers_and_consumers_at_once(front: Front) -> None:
    producers, consumers = 4, 4
    per_producer = _fits(front, producers, 1_000, step=50)
    pushed: list[int] = []
    seen: Counter[int] = Counter()
    lock = threading.Lock()
    done_pushing = threading.Event()
    finished = Counter[str]()

    def worker(f: Front) -> None:
        with lock:
            role = "producer" if finished["started"] < producers else "consumer"
            finished["started"] += 1
        if role == "producer":
            try:
                for start in range(0, per_producer, 50):
                    got = f.push_many([{"name": f"{start + k}"} for k in range(50)])
                    with lock:
                        pushed.extend(got)
            finally:  # a producer that fails must not leave the consumers waiting for it
                with lock:
                    finished["producers"] += 1
                    if finished["producers"] == producers:
                        done_pushing.set()
            return
        while True:
            # Once every push has committed, an empty pop means the queue is drained.
            pushes_done = done_pushing.is_set()
            batch = f.pop_batch(25)
            if not batch:
                if pushes_done:
                    return
                continue
            with lock:
                seen.update(i.id for i in batch)
            f.ack(batch)

    _run_threads(producers + consumers, worker, front)
    assert len(pushed) == producers * per_producer
    assert set(seen) == set(pushed) and max(seen.values()) == 1
    assert front.counts() == (0, 0)


def test_consumers_looping_on_ack_pop_never_deadlock(front: Front) -> None:
    """A worker's loop: ack the last batch and lease the next in one call, four at once while
    producers push. (On PostgreSQL a pick that met a row another consumer had just leased used
    to keep it locked to the end of its statement, while that consumer's ack in the same kind
    of statement waited for it: a deadlock, until the ack was made to finish before the
    pick.)"""
    producers, consumers = 2, 4
    per_producer = _fits(front, producers, 1_500, step=10)
    seen: Counter[int] = Counter()
    lock = threading.Lock()
    done_pushing = threading.Event()
    started = Counter[str]()

    def worker(f: Front) -> None:
        with lock:
            role = "producer" if started["n"] < producers else "consumer"
            started["n"] += 1
        if role == "producer":
            try:
                for start in range(0, per_producer, 10):
                    f.push_many([{"name": f"{start + k}"} for k in range(10)])
            finally:
                with lock:
                    started["pushed"] += 1
                    if started["pushed"] == producers:
                        done_pushing.set()
            return
        held: list[Any] = []
        while True:
            pushes_done = done_pushing.is_set()
            _, held = f.ack_pop(held, 5)
            with lock:
                seen.update(i.id for i in held)
            if not held and pushes_done:
                return

    _run_threads(producers + consumers, worker, front)
    assert len(seen) == producers * per_producer and max(seen.values()) == 1
    assert front.counts() == (0, 0)
