"""The load test's timeline: steady load on the shop while its worker is killed and restarted,
stopped (until the ``OrderEvent`` ring is full, or for ``max_stop``), restarted, and the
web's connections are cut; then the drain and the checks.

1. ``steady``: the offered load, everything running;
2. ``worker killed``: SIGKILL, restarted at once (its items come back when their 10-s leases
   end);
3. ``worker stopped``: SIGTERM (a graceful stop); it stays stopped until the ring's slots are
   all in use, then ``overflow`` seconds more (at most ``max_stop`` in all); the report says
   what the producers met meanwhile (what a full ring's pushes do is the ring's
   ``when_full``: the shop's spill into its overflow table);
4. ``worker restarted``;
5. ``web connections cut``: ``pg_terminate_backend`` on every connection of gunicorn's;
6. the load stops, the worker drains the queues, then stops with SIGTERM; the checks run.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg

from bench.loadtest import server_log
from bench.loadtest.load import Load, figures
from bench.loadtest.shop import WEB, ConnectionSampler, Shop, ShopConfig, terminate
from bench.loadtest.verify import Verdict, drained, verify


@dataclass(frozen=True)
class Plan:
    """The offered load and how long each phase lasts (seconds)."""

    rate: float
    clients: int
    steady: float
    overflow: float
    max_stop: float
    drain_patience: float


FULL = Plan(rate=60, clients=16, steady=45, overflow=30, max_stop=120, drain_patience=240)
QUICK = Plan(rate=100, clients=12, steady=2, overflow=1, max_stop=14, drain_patience=45)


@dataclass
class Phase:
    name: str
    start: float
    end: float = 0.0
    notes: list[str] = field(default_factory=list)


@dataclass
class Result:
    """Everything the report shows."""

    plan: Plan
    config: ShopConfig
    phases: list[Phase]
    load: Load
    load_seconds: float
    verdict: Verdict
    drained: bool
    drain_seconds: float
    causes: dict[str, int]
    max_connections: dict[str, int]
    max_connections_total: int
    #: The most backends of a killed worker still there at once (counted apart, not above).
    max_orphans: int
    ring_capacity: int

    @property
    def ok(self) -> bool:
        return self.drained and self.verdict.ok

    def as_dict(self) -> dict[str, Any]:
        return {
            "plan": vars(self.plan),
            "config": {k: v for k, v in vars(self.config).items() if k not in ("dsn", "logs")},
            "overall": figures(self.load.outcomes, self.load_seconds).as_dict(),
            "phases": [
                {
                    "name": p.name,
                    "notes": p.notes,
                    **figures(self.load.between(p.start, p.end), p.end - p.start).as_dict(),
                }
                for p in self.phases
            ],
            "server_causes": self.causes,
            "max_connections": self.max_connections,
            "max_connections_total": self.max_connections_total,
            "max_orphans": self.max_orphans,
            "ring_capacity": self.ring_capacity,
            "drained": self.drained,
            "drain_seconds": round(self.drain_seconds, 1),
            "verdict": self.verdict.as_dict(),
            "ok": self.ok,
        }


def _slots(dsn: str) -> tuple[int, int]:
    """The ring's (slots, slots in use): state 0 is an empty slot."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE state <> 0) FROM shop_orderevent"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def run(plan: Plan, config: ShopConfig, say: Any = print) -> Result:
    """Run the timeline on a migrated database; stop every process before returning."""
    shop = Shop(config)
    shop.migrate()
    capacity, _ = _slots(config.dsn)
    sampler = ConnectionSampler(config.dsn)
    shop.on_worker_start = sampler.worker_started
    phases: list[Phase] = []
    kills = 0

    def phase(name: str) -> Phase:
        now = time.monotonic()
        if phases:
            phases[-1].end = now
        phases.append(Phase(name, now))
        say(f"{name}")
        return phases[-1]

    load = Load(shop.port, plan.clients, plan.rate)
    sampler.start()
    try:
        shop.start_worker()
        shop.start_web()
        load.start()
        began = time.monotonic()
        phase("steady")
        time.sleep(plan.steady)

        p = phase("worker killed (SIGKILL), restarted")
        shop.stop_worker(signal.SIGKILL)
        kills += 1
        p.notes.append(f"{len(shop.orphans)} backend(s) of the killed worker left behind")
        shop.start_worker()
        time.sleep(plan.steady)

        p = phase("worker stopped (SIGTERM)")
        stopping = time.monotonic()
        status = shop.stop_worker(signal.SIGTERM)
        p.notes.append(f"exited {status} after {time.monotonic() - stopping:.1f} s")
        full_at = None
        while time.monotonic() - p.start < plan.max_stop:
            if full_at is None and _slots(config.dsn)[1] >= capacity:
                full_at = time.monotonic()
                p.notes.append(f"ring full after {full_at - p.start:.1f} s")
            if full_at is not None and time.monotonic() - full_at >= plan.overflow:
                break
            time.sleep(0.25)
        if full_at is None:
            p.notes.append(f"ring not full after {plan.max_stop:.0f} s")
        p.notes.append(f"stopped {time.monotonic() - p.start:.1f} s")

        phase("worker restarted")
        shop.start_worker()
        time.sleep(plan.steady)

        p = phase("web connections cut (pg_terminate_backend)")
        p.notes.append(f"{terminate(config.dsn, WEB)} connection(s) terminated")
        time.sleep(plan.steady)

        phases[-1].end = time.monotonic()
        load.stop()  # waits for the requests in flight
        load_seconds = time.monotonic() - began
        say("drain")
        drain_start = time.monotonic()
        while not (done := drained(config)):
            if time.monotonic() - drain_start > plan.drain_patience:
                break
            time.sleep(0.5)
        drain_seconds = time.monotonic() - drain_start
        shop.stop_worker(signal.SIGTERM)
    finally:
        load.stop()
        sampler.stop()
        shop.stop()
    acknowledged = {o.order for o in load.outcomes if o.order is not None}
    return Result(
        plan=plan,
        config=config,
        phases=phases,
        load=load,
        load_seconds=load_seconds,
        verdict=verify(config, acknowledged, kills),
        drained=done,
        drain_seconds=drain_seconds,
        causes=dict(sorted(server_log.causes(shop.web_log).items())),
        max_connections=dict(sorted(sampler.most.items())),
        max_connections_total=sampler.most_total,
        max_orphans=sampler.most_orphans,
        ring_capacity=capacity,
    )
