"""The load generator: client threads that place orders with ``POST /orders/`` at a steady
rate (or as fast as the site answers), each request on a new connection, and what they saw.
"""

from __future__ import annotations

import http.client
import json
import math
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import urlencode

#: Seconds a request may take before the client gives up on it (a hang guard: a push into the
#: shop's full ring spills, never waits; gunicorn's worker timeout is 30 s).
REQUEST_TIMEOUT = 35.0


@dataclass(frozen=True, slots=True)
class Outcome:
    """One request: when it started (monotonic), how long it took, and what came back: an HTTP
    status, or the client's exception class when no response came."""

    started: float
    seconds: float
    status: int | None
    error: str | None = None
    order: int | None = None

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


@dataclass
class Figures:
    """What a set of requests adds up to."""

    requests: int
    seconds: float
    ok: int
    p50_ms: float | None
    p99_ms: float | None
    non_2xx: dict[str, int] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.ok / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "requests": self.requests,
            "seconds": round(self.seconds, 2),
            "ok": self.ok,
            "req_per_s": round(self.rate, 1),
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
            "non_2xx": self.non_2xx,
        }


def percentile(sorted_values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0-1) of sorted values, nearest rank; None if there are none."""
    if not sorted_values:
        return None
    rank = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[rank]


def figures(outcomes: list[Outcome], seconds: float) -> Figures:
    """req/s (2xx only), p50/p99 latency of every request, and the others by status or error."""
    latencies = sorted(o.seconds * 1000 for o in outcomes)
    others: Counter[str] = Counter()
    for o in outcomes:
        if not o.ok:
            others[str(o.status) if o.status is not None else f"no response: {o.error}"] += 1
    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    return Figures(
        requests=len(outcomes),
        seconds=seconds,
        ok=sum(o.ok for o in outcomes),
        p50_ms=round(p50, 1) if p50 is not None else None,
        p99_ms=round(p99, 1) if p99 is not None else None,
        non_2xx=dict(sorted(others.items())),
    )


def place_order(port: int, n: int) -> Outcome:
    """One ``POST /orders/`` on a new connection to 127.0.0.1:``port``."""
    body = urlencode({"email": f"load{n}@example.com", "total": f"{n % 500}.{n % 100:02d}"})
    headers = {"Content-Type": "application/x-www-form-urlencoded", "Connection": "close"}
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT)
    try:
        conn.request("POST", "/orders/", body, headers)
        response = conn.getresponse()
        data = response.read()
    except (OSError, http.client.HTTPException) as exc:
        return Outcome(started, time.monotonic() - started, None, type(exc).__name__)
    finally:
        conn.close()
    order = None
    if response.status == 201:
        order = int(json.loads(data)["order"])
    return Outcome(started, time.monotonic() - started, response.status, order=order)


class Load:
    """``clients`` threads placing orders on the site at ``port``: at ``rate`` requests per
    second in all (each client on a fixed schedule, never catching up more than one request
    late), or as fast as the site answers with ``rate=None``. Runs from :meth:`start` until
    :meth:`stop`."""

    def __init__(self, port: int, clients: int, rate: float | None) -> None:
        if clients < 1 or (rate is not None and rate <= 0):
            raise ValueError(f"need clients >= 1 and a positive rate, got {clients}, {rate}")
        self.port, self.clients, self.rate = port, clients, rate
        self.outcomes: list[Outcome] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._count = 0
        self._threads = [
            threading.Thread(target=self._client, args=(i,), name=f"load-{i}", daemon=True)
            for i in range(clients)
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        """Stop the clients, waiting for their requests in flight (again: no-op)."""
        self._stop.set()
        for t in self._threads:
            if t.is_alive():
                t.join(REQUEST_TIMEOUT + 5)

    def between(self, start: float, end: float) -> list[Outcome]:
        """The requests started in ``[start, end)`` (monotonic seconds)."""
        with self._lock:
            return [o for o in self.outcomes if start <= o.started < end]

    def _next_number(self) -> int:
        with self._lock:
            self._count += 1
            return self._count

    def _client(self, index: int) -> None:
        interval = self.clients / self.rate if self.rate else 0.0
        due = time.monotonic() + interval * index / self.clients
        while not self._stop.is_set():
            if interval:
                wait = due - time.monotonic()
                if wait > 0 and self._stop.wait(wait):
                    break
                # Late (the site was slow): go on from now, not with a burst to catch up.
                due = max(due + interval, time.monotonic() - interval)
            outcome = place_order(self.port, self._next_number())
            with self._lock:
                self.outcomes.append(outcome)
