"""The ``stuck`` workload (ring systems): a ring of 64 slots with one slot a consumer holds,
of each kind, against the same ring without it: one client pair pushing a message, popping and
acknowledging it, for ``--pair-seconds``. A stuck slot must cost pushers a statement now and
then, never a wait: the figure is the rate, and the report gives each kind's ratio to ``none``.

Kinds: ``leased`` (a consumer leased a message for an hour and died), ``retrying`` (a message
waiting out an hour's back-off), ``claimed`` (a popper took the message's number and died).
"""

from __future__ import annotations

import datetime as dt

import psycopg

from bench.env import BenchEnv
from bench.measure import Measurement
from bench.systems.base import System
from bench.systems.dbqueue_ring import DBQueueRing

CAPACITY = 64
KINDS = ("none", "leased", "retrying", "claimed")
HOUR = dt.timedelta(hours=1)


def make_stuck(system: DBQueueRing, kind: str) -> None:
    """Leave one message of ``kind`` at the head of the system's (fresh) ring."""
    if kind == "none":
        return
    q, ex = system.queue, system.ex
    q.push(ex, {"payload": "stuck"})
    if kind == "claimed":
        with psycopg.connect(system.dsn, autocommit=True) as conn:
            conn.execute("SELECT nextval(%s)", (f'"{q.spec.pop_seq}"',))
        return
    (m,) = q.pop_batch(ex, 1, lease=HOUR)
    if kind == "retrying":
        q.fail(ex, m, "boom", delay=HOUR)


def stuck(env: BenchEnv, system: System, repeat: int) -> list[Measurement]:
    """Pairs throughput on a ring of 64 slots with and without a stuck slot of each kind."""
    assert isinstance(system, DBQueueRing)
    seconds = env.pair_seconds or (1.5 if env.quick else 5.0)
    out = []
    for kind in KINDS:
        runs = []
        for _ in range(env.repeat):
            system._capacity = CAPACITY  # the harness's rings are at least 1,000 slots
            system.reset()
            make_stuck(system, kind)
            popper = system.popper()
            try:
                runs.append(system.cycle(1, seconds, popper=popper).count / seconds)
            finally:
                popper.close()
        params = {"stuck": kind, "capacity": CAPACITY}
        out.append(Measurement(system.name, "stuck", params, runs, extra={"seconds": seconds}))
    return out
