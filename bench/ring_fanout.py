"""``python -m bench.ring_fanout``: fan-out consumer groups on the ring (issue 22 §1), measured.

One push delivered once to each of several named consumer groups, each with its own position,
leases and retries. A slot is free only when every group has settled it. The candidates,
prototyped as plain SQL (nothing under dbqueue/ changes), against what users do today:

* ``refcount`` (design A, Kejser's reference count): one slot table; each slot carries
  ``pending`` (groups yet to settle it), a ``leased`` bitmask and per-group lease columns
  (``lease_until_<g>``, ``attempts_<g>``); each group pops with its own sequence. Every pop
  and every ack of every group writes the shared slot row; the slot is free at pending = 0.
* ``low-water`` (design B, per-group pop positions and low-water marks): the slot table holds
  the payload only and only pushers write it; each group has a counter row (its next number)
  and a side table of its in-flight numbers (``fb_inflight``: inserted at pop, deleted at
  ack). A group's mark is least(next, min in-flight); a pusher reuses slot s only while every
  group's mark has passed the number s holds (the push reads the marks of all groups).
* ``group-rows`` (a third layout, measured beside them): the payload ring as in B, plus one
  narrow, preallocated state row per (slot, group): the number the group last took from that
  slot, its state, lease and attempts. A group's pop and ack write its own row only; a pusher
  reuses the slot when every group's row says "took the number the slot holds and settled
  it" (the push reads G rows by primary key).
* ``group-rows-pushed`` (C', beside C): C's tables, but a state row has three states (0
  empty, 1 ready, 2 leased) and ``pushed_at``, and the push writes them: in one statement it
  locks the slot's G state rows that settled p - C and, only when it got all G, sets each to
  (p, ready) and writes the payload. A group's pop (ready to leased) and ack (leased to
  empty) are then the ring's own statements on its state rows, joined to the payload; the
  cost is G more row writes (and G row locks) per push.
* ``ring-min x3``: one ring per group (dbqueue's ring tables), the three copies pushed in one
  transaction, popped and acked by the same minimal statements as the prototypes: the
  like-for-like baseline of "a ring per group".
* ``ring x3``: the same three rings driven by dbqueue's own ring statements (ring_push,
  ring_pop_leased and its held-claims variant, ring_ack), as bench/ring_pgbench.py renders
  them: what users do today.
* ``split x3``: three split queues (split_push x3 in one transaction, split_pop_leased,
  split_ack).

Workload: 3 groups (email, analytics, search-index), single-message pushes from 1 pusher and
pop + ack of one message by 1 consumer per group, each a pgbench process (``-M prepared``,
one client) running for ``--seconds``. A pusher that finds its slot held retries the same
number after 1 ms (the ring's backpressure); a consumer that finds nothing sleeps 1 ms. The
prototypes' pops take a number only once its message has landed (exact with one consumer per
group; several consumers per group need the ring's held claims, see bench/ring_pgbench.py).
Pops and acks commit with synchronous_commit off (as the library's at-least-once pops and
acks do); pushes with ``--push-sync`` (default off: with it on, every system waits on the
pusher's WAL flush, about 1 ms a commit here, and the layouts' own costs hardly show).

Per system, measured on one embedded PostgreSQL (autovacuum on), each in a database of its
own: messages delivered per second per group, WAL bytes per fan-out message (the server's
pg_current_wal_lsn() before and after), the bytes of all its tables (at the start, sampled
during the run and at the end), and pg_stat_user_tables (updates, HOT updates, dead tuples,
inserts, deletes, autovacuums). Then a lagging group: ``--lag-seconds`` with the last group's
consumer stopped, to show what it does to pushers and which group a QueueFull would name.

Output: ``bench/reports/<date>-ring-fanout.md`` and ``.json`` (``--out`` for another stem).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from bench import env as bench_env
from bench import report
from bench.env import BenchEnv, libpq_environ
from bench.ring_pgbench import _PARAM, LITERALS, aggregated
from dbqueue import Field, FieldKind, QueueOptions, QueueSpec, RingQueue, SplitQueue, get_dialect
from dbqueue.schema import create_ring_statements, create_statements

POSTGRESQL = get_dialect("postgresql")
REPORTS = Path(__file__).resolve().parent / "reports"
GROUPS = ("email", "analytics", "search-index")
G = len(GROUPS)
FIELDS = (Field("payload", FieldKind.TEXT),)
PAYLOAD = "repeat('x', 300)"
LEASE = "'30 seconds'::interval"
#: The storage of dbqueue's ring table (dbqueue.schema: fillfactor 10, vacuumed after a lap of
#: changes, never analyzed), given to the prototypes' slot tables too; %s: the slot count.
RING_STORAGE = (
    "fillfactor = 10, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = %s, "
    "autovacuum_vacuum_cost_delay = 0, autovacuum_analyze_scale_factor = 0, "
    "autovacuum_analyze_threshold = 2147483647"
)
#: A table of short-lived rows (the split queue's meta table's settings, dbqueue.schema).
CHURN_STORAGE = (
    "autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000, "
    "autovacuum_vacuum_cost_delay = 0"
)
#: The groups' numbers and names, as a VALUES list.
NAMES = "(VALUES " + ", ".join(f"({g}, '{name}')" for g, name in enumerate(GROUPS)) + ")"
#: A consumer that found nothing, and a pusher whose slot is held, wait this long.
NAP = "\\sleep 1 ms"


def line(sql: str) -> str:
    """``sql`` on one line: pgbench reads a statement to the end of its line."""
    return " ".join(sql.split())


def next_of(seq: str) -> str:
    """The next number ``seq`` hands out (read, not taken)."""
    return f"(SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM {seq})"


def consumer(pop: str, ack: str) -> str:
    """A consumer's loop: ``pop`` (one row: ``id``, -1 when nothing was taken, and ``att``),
    then ``ack`` of what it took, or a nap."""
    return f"{line(pop)}\n\\gset\n\\if :id >= 0\n{line(ack)};\n\\else\n{NAP}\n\\endif\n"


def pusher(push: str) -> str:
    """A pusher's loop for one slot table: ``push`` takes a new number when ``:rp`` is -1,
    else retries that number, and sets ``rp`` to -1 once it landed."""
    return f"{line(push)}\n\\gset\n\\if :rp >= 0\n{NAP}\n\\endif\n"


def pusher_copies(pushes: list[str]) -> str:
    """A pusher of a copy per group in one transaction. ``pushes[g]`` retries ``:rp<g>`` when
    it is not -1, else takes a new number, and sets ``rp<g>``. New copies are pushed only
    when every copy of the last message landed (the blocked ones are retried alone)."""
    fresh = " and ".join(f"(:rp{g} < 0)" for g in range(len(pushes)))
    out = [f"\\set fresh {fresh}", "BEGIN;"]
    for g, push in enumerate(pushes):
        out += [f"\\if :fresh or :rp{g} >= 0", line(push), "\\gset", "\\endif"]
    out += ["COMMIT;", f"\\if {' or '.join(f':rp{g} >= 0' for g in range(len(pushes)))}", NAP]
    out.append("\\endif")
    return "\n".join(out) + "\n"


def landed_push(table: str, seq: str, var: str, capacity: int, sets: str, free: str) -> str:
    """A push of number ``:<var>`` (-1: a new one from ``seq``) into its slot of ``table``
    when ``free`` holds, SET ``sets``; returns ``<var>``: -1 if it landed, else the number."""
    return f"""
        WITH r AS (SELECT COALESCE(NULLIF(:{var}::bigint, -1), nextval('{seq}')) AS p),
        u AS (UPDATE {table} AS t SET {sets} FROM r
              WHERE t.slot = mod(r.p, {capacity}) AND {free} RETURNING t.seq)
        SELECT CASE WHEN EXISTS (SELECT 1 FROM u) THEN -1 ELSE (SELECT p FROM r) END AS {var}
    """


def taken(cte: str) -> str:
    """The one row of a pop whose last CTE ``cte`` returns ``seq`` and ``att``."""
    return f"SELECT coalesce(max(seq), -1) AS id, coalesce(max(att), 0) AS att FROM {cte}"


@dataclass
class System:
    """A way of fanning out: its tables, its pgbench scripts, and how to read its counters."""

    key: str
    label: str
    setup: list[str]
    push: str
    pops: list[str]
    #: SQL giving one row: messages handed out to pushers (per group: a list), the numbers
    #: each group has taken and not yet settled, and each group's next number.
    positions: str
    prototype: bool = False
    #: SQL naming the groups that hold the slot of the pusher's last number (what a QueueFull
    #: would name), for the prototypes.
    blocking: str | None = None
    #: SQL giving the pusher's variables for a new pgbench process: the number it was retrying
    #: when the last one stopped (else -1), which a new pusher must retry, not leave a hole.
    resume: str | None = None
    start: dict[str, str] = field(default_factory=dict)


# -- A: the reference count --------------------------------------------------------------


def resume_one(table: str, seq: str, var: str, capacity: int) -> str:
    """The ``resume`` column of a slot table: its last number if it has not landed, else -1."""
    p = f"({next_of(seq)} - 1)"
    return f"""CASE WHEN {p} < 0 OR EXISTS (SELECT 1 FROM {table} AS t
               WHERE t.slot = mod({p}, {capacity}) AND t.seq >= {p}) THEN -1 ELSE {p} END
               AS {var}"""


def refcount(capacity: int) -> System:
    """Design A: pending + leased bitmask + per-group lease columns on the slot row."""
    per_group = ", ".join(
        f"lease_until_{g} timestamptz, attempts_{g} smallint NOT NULL DEFAULT 0" for g in range(G)
    )
    setup = [
        f"""CREATE TABLE fa_ring (slot integer PRIMARY KEY, seq bigint NOT NULL,
            pending smallint NOT NULL DEFAULT 0, leased smallint NOT NULL DEFAULT 0,
            pushed_at timestamptz, {per_group}, payload text)
            WITH ({RING_STORAGE % capacity})""",
        f"""INSERT INTO fa_ring (slot, seq, payload) SELECT s, s - {capacity}, repeat('.', 32)
            FROM generate_series(0, {capacity - 1}) AS s""",
        "CREATE SEQUENCE fa_push AS bigint MINVALUE 0 START 0",
        *(f"CREATE SEQUENCE fa_pop_{g} AS bigint MINVALUE 0 START 0" for g in range(G)),
        "ANALYZE fa_ring",
    ]
    resets = ", ".join(f"lease_until_{g} = NULL, attempts_{g} = 0" for g in range(G))
    push = landed_push(
        "fa_ring", "fa_push", "rp", capacity,
        f"seq = r.p, pending = {G}, leased = 0, pushed_at = statement_timestamp(), {resets}, "
        f"payload = {PAYLOAD}",
        f"t.seq = r.p - {capacity} AND t.pending = 0",
    )  # fmt: skip
    pops = []
    for g in range(G):
        nxt, bit = next_of(f"fa_pop_{g}"), f"{1 << g}::smallint"
        pop = f"""
            WITH c AS (SELECT nextval('fa_pop_{g}') AS q WHERE EXISTS (
                SELECT 1 FROM fa_ring AS s WHERE s.slot = mod({nxt}, {capacity})
                AND s.seq = {nxt})),
            u AS (UPDATE fa_ring AS t SET leased = t.leased | {bit},
                  attempts_{g} = t.attempts_{g} + 1,
                  lease_until_{g} = statement_timestamp() + {LEASE}
                  FROM c WHERE t.slot = mod(c.q, {capacity}) AND t.seq = c.q
                  AND t.pending > 0 AND t.leased & {bit} = 0
                  RETURNING t.seq, t.attempts_{g} AS att, t.payload)
            {taken("u")}
        """
        ack = f"""
            UPDATE fa_ring AS t SET pending = t.pending - 1, leased = t.leased & ~{bit},
            lease_until_{g} = NULL
            WHERE t.slot = mod(:id::bigint, {capacity}) AND t.seq = :id::bigint
            AND t.leased & {bit} <> 0 AND t.attempts_{g} = :att::smallint
        """
        pops.append(consumer(pop, ack))
    positions = f"""
        SELECT {next_of("fa_push")} AS pushed,
        ARRAY[{", ".join(f"(SELECT count(*) FROM fa_ring WHERE leased & {1 << g} <> 0)" for g in range(G))}] AS open,
        ARRAY[{", ".join(next_of(f"fa_pop_{g}") for g in range(G))}] AS next
    """  # noqa: E501
    holds = " OR ".join(
        f"(g.grp = {g} AND (t.leased & {1 << g} <> 0 OR {next_of(f'fa_pop_{g}')} <= t.seq))"
        for g in range(G)
    )
    blocking = f"""
        SELECT string_agg(g.name, ', ' ORDER BY g.grp) FROM {NAMES} AS g(grp, name), fa_ring AS t
        WHERE t.slot = mod({next_of("fa_push")} - 1, {capacity}) AND t.pending > 0 AND ({holds})
    """
    return System("refcount", "A: reference count on the slot row", setup, pusher(push), pops,
                  positions, prototype=True, blocking=blocking,
                  resume=f"SELECT {resume_one('fa_ring', 'fa_push', 'rp', capacity)}")  # fmt: skip


# -- B: per-group pop positions and low-water marks ----------------------------------------


def low_water(capacity: int) -> System:
    """Design B: payload ring written by pushers only; per-group counter rows and in-flight
    rows; the push checks every group's low-water mark."""
    setup = [
        f"""CREATE TABLE fb_ring (slot integer PRIMARY KEY, seq bigint NOT NULL,
            pushed_at timestamptz, payload text) WITH ({RING_STORAGE % capacity})""",
        f"""INSERT INTO fb_ring (slot, seq, payload) SELECT s, s - {capacity}, repeat('.', 32)
            FROM generate_series(0, {capacity - 1}) AS s""",
        """CREATE TABLE fb_group (grp smallint PRIMARY KEY, name text NOT NULL,
            next bigint NOT NULL DEFAULT 0) WITH (fillfactor = 10)""",
        "INSERT INTO fb_group (grp, name) VALUES "
        + ", ".join(f"({g}, '{name}')" for g, name in enumerate(GROUPS)),
        f"""CREATE TABLE fb_inflight (grp smallint NOT NULL, q bigint NOT NULL,
            lease_until timestamptz NOT NULL, attempts smallint NOT NULL,
            PRIMARY KEY (grp, q)) WITH ({CHURN_STORAGE})""",
        "CREATE SEQUENCE fb_push AS bigint MINVALUE 0 START 0",
        "ANALYZE fb_ring",
        "ANALYZE fb_group",
    ]
    push = landed_push(
        "fb_ring", "fb_push", "rp", capacity,
        f"seq = r.p, pushed_at = statement_timestamp(), payload = {PAYLOAD}",
        f"""t.seq = r.p - {capacity} AND r.p - {capacity} < (
            SELECT min(LEAST(g.next, COALESCE(
                (SELECT min(i.q) FROM fb_inflight AS i WHERE i.grp = g.grp), g.next)))
            FROM fb_group AS g)""",
    )  # fmt: skip
    pops = []
    for g in range(G):
        pop = f"""
            WITH c AS (UPDATE fb_group AS g SET next = g.next + 1
                WHERE g.grp = {g} AND EXISTS (SELECT 1 FROM fb_ring AS s
                WHERE s.slot = mod(g.next, {capacity}) AND s.seq = g.next)
                RETURNING g.next - 1 AS q),
            i AS (INSERT INTO fb_inflight (grp, q, lease_until, attempts)
                  SELECT {g}, c.q, statement_timestamp() + {LEASE}, 1 FROM c
                  RETURNING q, attempts),
            u AS (SELECT i.q AS seq, i.attempts AS att, t.payload FROM i JOIN fb_ring AS t
                  ON t.slot = mod(i.q, {capacity}) AND t.seq = i.q)
            {taken("u")}
        """
        ack = f"""DELETE FROM fb_inflight WHERE grp = {g} AND q = :id::bigint
                  AND attempts = :att::smallint"""
        pops.append(consumer(pop, ack))
    positions = f"""
        SELECT {next_of("fb_push")} AS pushed,
        ARRAY[{", ".join(f"(SELECT count(*) FROM fb_inflight WHERE grp = {g})" for g in range(G))}] AS open,
        ARRAY(SELECT next FROM fb_group ORDER BY grp) AS next
    """  # noqa: E501
    blocking = f"""
        SELECT string_agg(g.name, ', ' ORDER BY g.grp) FROM fb_group AS g
        WHERE LEAST(g.next, COALESCE((SELECT min(i.q) FROM fb_inflight AS i WHERE i.grp = g.grp),
                                     g.next)) <= {next_of("fb_push")} - 1 - {capacity}
    """
    return System("low-water", "B: per-group positions, low-water marks", setup, pusher(push),
                  pops, positions, prototype=True, blocking=blocking,
                  resume=f"SELECT {resume_one('fb_ring', 'fb_push', 'rp', capacity)}")  # fmt: skip


# -- a third layout: a state row per (slot, group) -----------------------------------------


def group_rows(capacity: int) -> System:
    """Payload ring written by pushers only, and a preallocated state row per slot and group
    that only that group writes; the push reads the slot's G state rows."""
    setup = [
        f"""CREATE TABLE fc_ring (slot integer PRIMARY KEY, seq bigint NOT NULL,
            pushed_at timestamptz, payload text) WITH ({RING_STORAGE % capacity})""",
        f"""INSERT INTO fc_ring (slot, seq, payload) SELECT s, s - {capacity}, repeat('.', 32)
            FROM generate_series(0, {capacity - 1}) AS s""",
        f"""CREATE TABLE fc_state (slot integer NOT NULL, grp smallint NOT NULL,
            seq bigint NOT NULL, state smallint NOT NULL DEFAULT 0,
            attempts smallint NOT NULL DEFAULT 0, lease_until timestamptz,
            PRIMARY KEY (slot, grp))
            WITH ({(RING_STORAGE % (capacity * G)).replace("fillfactor = 10", "fillfactor = 50")})""",  # noqa: E501
        f"""INSERT INTO fc_state (slot, grp, seq) SELECT s, g, s - {capacity}
            FROM generate_series(0, {capacity - 1}) AS s, generate_series(0, {G - 1}) AS g
            ORDER BY s, g""",
        "CREATE SEQUENCE fc_push AS bigint MINVALUE 0 START 0",
        *(f"CREATE SEQUENCE fc_pop_{g} AS bigint MINVALUE 0 START 0" for g in range(G)),
        "ANALYZE fc_ring",
        "ANALYZE fc_state",
    ]
    push = landed_push(
        "fc_ring", "fc_push", "rp", capacity,
        f"seq = r.p, pushed_at = statement_timestamp(), payload = {PAYLOAD}",
        f"""t.seq = r.p - {capacity} AND NOT EXISTS (SELECT 1 FROM fc_state AS s
            WHERE s.slot = mod(r.p, {capacity})
            AND NOT (s.seq = r.p - {capacity} AND s.state = 0))""",
    )  # fmt: skip
    pops = []
    for g in range(G):
        nxt = next_of(f"fc_pop_{g}")
        pop = f"""
            WITH c AS (SELECT nextval('fc_pop_{g}') AS q WHERE EXISTS (
                SELECT 1 FROM fc_ring AS s WHERE s.slot = mod({nxt}, {capacity})
                AND s.seq = {nxt})),
            u AS (UPDATE fc_state AS st SET seq = c.q, state = 1, attempts = 1,
                  lease_until = statement_timestamp() + {LEASE}
                  FROM c WHERE st.slot = mod(c.q, {capacity}) AND st.grp = {g}
                  AND st.seq = c.q - {capacity} AND st.state = 0
                  RETURNING st.seq, st.attempts),
            v AS (SELECT u.seq, u.attempts AS att, t.payload FROM u JOIN fc_ring AS t
                  ON t.slot = mod(u.seq, {capacity}) AND t.seq = u.seq)
            {taken("v")}
        """
        ack = f"""UPDATE fc_state SET state = 0, lease_until = NULL
                  WHERE slot = mod(:id::bigint, {capacity}) AND grp = {g}
                  AND seq = :id::bigint AND state = 1 AND attempts = :att::smallint"""
        pops.append(consumer(pop, ack))
    positions = f"""
        SELECT {next_of("fc_push")} AS pushed,
        ARRAY[{", ".join(f"(SELECT count(*) FROM fc_state WHERE grp = {g} AND state = 1)" for g in range(G))}] AS open,
        ARRAY[{", ".join(next_of(f"fc_pop_{g}") for g in range(G))}] AS next
    """  # noqa: E501
    p = f"({next_of('fc_push')} - 1)"
    blocking = f"""
        SELECT string_agg(g.name, ', ' ORDER BY g.grp) FROM {NAMES} AS g(grp, name)
        JOIN fc_state AS s ON s.grp = g.grp
        WHERE s.slot = mod({p}, {capacity}) AND NOT (s.seq = {p} - {capacity} AND s.state = 0)
    """
    return System("group-rows", "C: a state row per (slot, group)", setup, pusher(push), pops,
                  positions, prototype=True, blocking=blocking,
                  resume=f"SELECT {resume_one('fc_ring', 'fc_push', 'rp', capacity)}")  # fmt: skip


def group_rows_pushed(capacity: int) -> System:
    """C': C's tables, but the push also marks every group's state row of the slot ready
    (0 empty, 1 ready, 2 leased), so a group's pop and ack are the ring's own statements on
    its state rows; the push locks and writes the slot's G state rows besides the payload."""
    setup = [
        f"""CREATE TABLE fp_ring (slot integer PRIMARY KEY, seq bigint NOT NULL,
            pushed_at timestamptz, payload text) WITH ({RING_STORAGE % capacity})""",
        f"""INSERT INTO fp_ring (slot, seq, payload) SELECT s, s - {capacity}, repeat('.', 32)
            FROM generate_series(0, {capacity - 1}) AS s""",
        f"""CREATE TABLE fp_state (slot integer NOT NULL, grp smallint NOT NULL,
            seq bigint NOT NULL, state smallint NOT NULL DEFAULT 0,
            attempts smallint NOT NULL DEFAULT 0, lease_until timestamptz,
            pushed_at timestamptz, PRIMARY KEY (slot, grp))
            WITH ({(RING_STORAGE % (capacity * G)).replace("fillfactor = 10", "fillfactor = 50")})""",  # noqa: E501
        f"""INSERT INTO fp_state (slot, grp, seq) SELECT s, g, s - {capacity}
            FROM generate_series(0, {capacity - 1}) AS s, generate_series(0, {G - 1}) AS g
            ORDER BY s, g""",
        "CREATE SEQUENCE fp_push AS bigint MINVALUE 0 START 0",
        *(f"CREATE SEQUENCE fp_pop_{g} AS bigint MINVALUE 0 START 0" for g in range(G)),
        "ANALYZE fp_ring",
        "ANALYZE fp_state",
    ]
    # k locks the slot's state rows that settled p - C; the slot's G rows and its payload are
    # written only when all G were locked (n = G), so the push lands whole or not at all.
    push = f"""
        WITH r AS (SELECT COALESCE(NULLIF(:rp::bigint, -1), nextval('fp_push')) AS p),
        k AS (SELECT s.slot, s.grp FROM fp_state AS s, r WHERE s.slot = mod(r.p, {capacity})
              AND s.seq = r.p - {capacity} AND s.state = 0 FOR UPDATE OF s),
        n AS (SELECT count(*) AS n FROM k),
        w AS (UPDATE fp_state AS s SET seq = r.p, state = 1, attempts = 0, lease_until = NULL,
              pushed_at = statement_timestamp() FROM r, n
              WHERE n.n = {G} AND s.slot = mod(r.p, {capacity}) AND s.seq = r.p - {capacity}
              AND s.state = 0 RETURNING s.grp),
        u AS (UPDATE fp_ring AS t SET seq = r.p, pushed_at = statement_timestamp(),
              payload = {PAYLOAD} FROM r, n
              WHERE n.n = {G} AND t.slot = mod(r.p, {capacity}) AND t.seq = r.p - {capacity}
              RETURNING t.seq)
        SELECT CASE WHEN EXISTS (SELECT 1 FROM u) THEN -1 ELSE (SELECT p FROM r) END AS rp
    """
    pops = []
    for g in range(G):
        nxt = next_of(f"fp_pop_{g}")
        pop = f"""
            WITH c AS (SELECT nextval('fp_pop_{g}') AS q WHERE EXISTS (
                SELECT 1 FROM fp_state AS s WHERE s.slot = mod({nxt}, {capacity})
                AND s.grp = {g} AND s.seq = {nxt} AND s.state = 1)),
            u AS (UPDATE fp_state AS st SET state = 2, attempts = st.attempts + 1,
                  lease_until = statement_timestamp() + {LEASE}
                  FROM c WHERE st.slot = mod(c.q, {capacity}) AND st.grp = {g}
                  AND st.seq = c.q AND st.state = 1
                  RETURNING st.seq, st.attempts),
            v AS (SELECT u.seq, u.attempts AS att, t.payload FROM u JOIN fp_ring AS t
                  ON t.slot = mod(u.seq, {capacity}) AND t.seq = u.seq)
            {taken("v")}
        """
        ack = f"""UPDATE fp_state SET state = 0, lease_until = NULL
                  WHERE slot = mod(:id::bigint, {capacity}) AND grp = {g}
                  AND seq = :id::bigint AND state = 2 AND attempts = :att::smallint"""
        pops.append(consumer(pop, ack))
    positions = f"""
        SELECT {next_of("fp_push")} AS pushed,
        ARRAY[{", ".join(f"(SELECT count(*) FROM fp_state WHERE grp = {g} AND state = 2)" for g in range(G))}] AS open,
        ARRAY[{", ".join(next_of(f"fp_pop_{g}") for g in range(G))}] AS next
    """  # noqa: E501
    # A blocked push changed none of the slot's rows: they all hold p - C, and the groups
    # whose row has not settled it hold the slot.
    p = f"({next_of('fp_push')} - 1)"
    blocking = f"""
        SELECT string_agg(g.name, ', ' ORDER BY g.grp) FROM {NAMES} AS g(grp, name)
        JOIN fp_state AS s ON s.grp = g.grp
        WHERE s.slot = mod({p}, {capacity}) AND s.seq = {p} - {capacity} AND s.state <> 0
    """
    return System("group-rows-pushed", "C': push marks every group's row ready", setup,
                  pusher(push), pops, positions, prototype=True, blocking=blocking,
                  resume=f"SELECT {resume_one('fp_ring', 'fp_push', 'rp', capacity)}")  # fmt: skip


# -- baselines: a copy per group -------------------------------------------------------------


def ring_queues(capacity: int) -> list[RingQueue]:
    """The baselines' rings, one per group (dbqueue's ring tables and statements)."""
    return [
        RingQueue(QueueSpec(f"fan_ring_{g}", FIELDS, QueueOptions(capacity=capacity)), POSTGRESQL)
        for g in range(G)
    ]


def ring_setup(capacity: int) -> list[str]:
    """The statements creating the baselines' rings."""
    return [s for q in ring_queues(capacity) for s in create_ring_statements(q.spec, POSTGRESQL)]


def ring_positions(capacity: int) -> str:
    """The three rings' counters: pushes per ring, numbers claimed but not settled (a slot
    ready or leased below the pop sequence), next pop number."""
    tables = [q.spec.table for q in ring_queues(capacity)]
    return f"""
        SELECT ARRAY[{", ".join(next_of(f'"{t}_push_seq"') for t in tables)}] AS pushed,
        ARRAY[{", ".join(f'(SELECT count(*) FROM "{t}" WHERE state <> 0 AND seq < {next_of(chr(34) + t + "_pop_seq" + chr(34))})' for t in tables)}] AS open,
        ARRAY[{", ".join(next_of(f'"{t}_pop_seq"') for t in tables)}] AS next
    """  # noqa: E501


def ring_resume(capacity: int) -> str:
    """The ``resume`` of the rings of a copy per group."""
    cols = [
        resume_one(f'"{q.spec.table}"', f'"{q.spec.table}_push_seq"', f"rp{g}", capacity)
        for g, q in enumerate(ring_queues(capacity))
    ]
    return "SELECT " + ", ".join(cols)


def ring_min(capacity: int) -> System:
    """A ring per group, the copies pushed in one transaction, with the prototypes' minimal
    statements (landed-gated pop, fenced ack) on dbqueue's ring tables."""
    pushes, pops = [], []
    for g, q in enumerate(ring_queues(capacity)):
        t, ps, pq = f'"{q.spec.table}"', f'"{q.spec.table}_push_seq"', f'"{q.spec.table}_pop_seq"'
        pushes.append(
            landed_push(
                t,
                ps,
                f"rp{g}",
                capacity,
                "seq = r.p, state = 1, attempts = 0, pushed_at = statement_timestamp(), "
                f"lease_until = NULL, last_error = NULL, payload = {PAYLOAD}",
                f"t.seq = r.p - {capacity} AND t.state = 0",
            )
        )
        nxt = next_of(pq)
        pop = f"""
            WITH c AS (SELECT nextval('{pq}') AS q WHERE EXISTS (
                SELECT 1 FROM {t} AS s WHERE s.slot = mod({nxt}, {capacity})
                AND s.seq = {nxt})),
            u AS (UPDATE {t} AS t SET state = 2, attempts = t.attempts + 1,
                  lease_until = statement_timestamp() + {LEASE}
                  FROM c WHERE t.slot = mod(c.q, {capacity}) AND t.seq = c.q AND t.state = 1
                  RETURNING t.seq, t.attempts AS att, t.payload)
            {taken("u")}
        """
        ack = f"""UPDATE {t} AS t SET state = 0, lease_until = NULL
                  WHERE t.slot = mod(:id::bigint, {capacity}) AND t.seq = :id::bigint
                  AND t.state = 2 AND t.attempts = :att::smallint"""
        pops.append(consumer(pop, ack))
    return System("ring-min-x3", "a ring per group, minimal statements", ring_setup(capacity),
                  pusher_copies(pushes), pops, ring_positions(capacity),
                  resume=ring_resume(capacity))  # fmt: skip


def render(queue: SplitQueue | RingQueue, name: str, **literals: str) -> str:
    """A dbqueue statement with pgbench variables and literals (bench/ring_pgbench.py's, and
    ``literals``) for its parameters."""
    text = queue.statements[name].parts[0]
    values = {**LITERALS, **literals}
    return line(_PARAM.sub(lambda m: values[m.group(1)], text))


def ring_x3(capacity: int) -> System:
    """A ring per group driven by dbqueue's own statements: ring_push (retrying the same number
    while the slot is held, as the core does before QueueFull), ring_pop_leased and its
    held-claims variant, ring_ack."""
    common = {"capacity": str(capacity)}
    pushes, pops = [], []
    for g, q in enumerate(ring_queues(capacity)):
        push = render(q, "ring_push", p=f"NULLIF(:rp{g}::bigint, -1)", **common)
        pushes.append(
            aggregated(
                push,
                "SELECT r.p AS number",
                f"SELECT CASE WHEN bool_and(landed) THEN -1 ELSE max(number) END AS rp{g} FROM x",
            )
        )
        landed = "NOT taken AND slot_seq = number AND slot_state = 1"
        keep = (
            "SELECT coalesce(array_agg(number) FILTER (WHERE NOT taken), '{}') AS held, "
            "count(*) FILTER (WHERE NOT taken) AS nheld, "
            f"count(*) FILTER (WHERE {landed}) AS nlanded, "
            "coalesce(max(number) FILTER (WHERE taken), -1) AS id, "
            "coalesce(max(attempts) FILTER (WHERE taken), 0) AS att FROM x"
        )
        new = aggregated(render(q, "ring_pop_leased", **common), "SELECT u.seq AS number", keep)
        held = aggregated(
            render(q, "ring_pop_leased_held", **common), "SELECT u.seq AS number", keep
        )
        ack = render(q, "ring_ack", ids="ARRAY[:id::bigint]", attempts="ARRAY[:att::smallint]")
        pops.append(
            "\\if :nheld = 0\n" + new + "\n\\gset\n\\else\n" + held + "\n\\gset\n\\endif\n"
            f"\\if :id >= 0\n{ack};\n\\else\n{NAP}\n\\endif\n"
        )
    return System("ring-x3", "a ring per group, dbqueue's ring statements", ring_setup(capacity),
                  pusher_copies(pushes), pops, ring_positions(capacity),
                  start={"nheld": "0", "nlanded": "0", "held": "{}"},
                  resume=ring_resume(capacity))  # fmt: skip


def split_x3(capacity: int) -> System:
    """A split queue per group: split_push x3 in one transaction, split_pop_leased, split_ack."""
    queues = [SplitQueue(QueueSpec(f"fan_split_{g}", FIELDS), POSTGRESQL) for g in range(G)]
    setup = [s for q in queues for s in create_statements(q.spec, POSTGRESQL)]
    push = "BEGIN;\n" + "".join(f"{render(q, 'split_push')};\n" for q in queues) + "COMMIT;\n"
    pops = []
    for q in queues:
        pop = aggregated(
            render(q, "split_pop_leased"), "SELECT m.id, m.attempts",
            "SELECT coalesce(max(id), -1) AS id, coalesce(max(attempts), 0) AS att FROM x",
        )  # fmt: skip
        ack = render(
            q, "split_ack", ids="ARRAY[:id::bigint]", attempts="ARRAY[:att::smallint]", count="1"
        )
        pops.append(consumer(pop, ack))
    meta = [q.spec.meta_table for q in queues]
    positions = f"""
        SELECT ARRAY[{", ".join(f"(SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = '{m}')" for m in meta)}] AS pushed,
        ARRAY[{", ".join(f'(SELECT count(*) FROM "{m}" WHERE state = 1)' for m in meta)}] AS open,
        ARRAY[{", ".join(f"(SELECT n_tup_ins - (SELECT count(*) FROM \"{m}\" WHERE state = 0) FROM pg_stat_user_tables WHERE relname = '{m}')" for m in meta)}] AS next
    """  # noqa: E501
    return System("split-x3", "a split queue per group", setup, push, pops, positions)


BUILDERS: tuple[Callable[[int], System], ...] = (
    refcount, low_water, group_rows, group_rows_pushed, ring_min, ring_x3, split_x3,
)  # fmt: skip


# -- running ---------------------------------------------------------------------------------


def launch(
    env: BenchEnv, dsn: str, script: str, seconds: float, variables: dict[str, str], sync: str
) -> subprocess.Popen[str]:
    """pgbench, one client, running ``script`` for ``seconds`` (not waited for)."""
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(script)
    defines = [arg for k, v in variables.items() for arg in ("-D", f"{k}={v}")]
    cmd = [
        str(env.pg_bin / "pgbench"), "-n", "-M", "prepared", "-c", "1", "-j", "1",
        "-T", str(max(1, round(seconds))), *defines, "-f", f.name,
    ]  # fmt: skip
    environ = libpq_environ(dsn, {**os.environ, "PGOPTIONS": f"-c synchronous_commit={sync}"})
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=environ)  # fmt: skip
    proc.script_path = f.name  # type: ignore[attr-defined]
    return proc


def finish(procs: list[subprocess.Popen[str]]) -> None:
    """Wait for the pgbench processes; raise with pgbench's error if one failed."""
    errors = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        Path(proc.script_path).unlink(missing_ok=True)  # type: ignore[attr-defined]
        if proc.returncode != 0 or "tps" not in out:
            errors.append(err.strip()[-1500:] or out[-1500:])
    if errors:
        raise RuntimeError("pgbench failed: " + "\n".join(errors))


def stats(conn: psycopg.Connection[Any]) -> dict[str, dict[str, int]]:
    """pg_stat_user_tables and the bytes (with indexes and TOAST) of every table."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    rows = conn.execute(
        "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del, n_dead_tup, "
        "n_live_tup, autovacuum_count, pg_total_relation_size(relid) FROM pg_stat_user_tables"
    ).fetchall()
    keys = ("ins", "upd", "hot", "del", "dead", "live", "autovacuums", "bytes")
    return {r[0]: dict(zip(keys, (int(v) for v in r[1:]), strict=True)) for r in rows}


def total_bytes(conn: psycopg.Connection[Any]) -> int:
    """The bytes of every table of the database, with indexes and TOAST."""
    return int(
        conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_stat_user_tables"
        ).fetchone()[0]  # type: ignore[index]
    )


def lsn(conn: psycopg.Connection[Any]) -> int:
    """The server's WAL insert position, in bytes."""
    return int(conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0])  # type: ignore[index]


def positions(conn: psycopg.Connection[Any], system: System) -> dict[str, list[int]]:
    """Pushed (per group), open (taken, not settled) and next number, per group."""
    pushed, open_, nxt = conn.execute(line(system.positions)).fetchone()  # type: ignore[misc]
    pushed = pushed if isinstance(pushed, list) else [pushed] * G
    return {"pushed": [int(x) for x in pushed], "open": [int(x) for x in open_],
            "next": [int(x) for x in nxt]}  # fmt: skip


def delivered(pos: dict[str, list[int]]) -> list[int]:
    """Messages each group took and settled: its next number less those still open."""
    return [n - o for n, o in zip(pos["next"], pos["open"], strict=True)]


def run_roles(
    env: BenchEnv,
    dsn: str,
    system: System,
    seconds: float,
    groups: int,
    sample: Callable[[], None],
    push_sync: str,
    resumed: dict[str, str],
) -> None:
    """The pusher (synchronous_commit ``push_sync``) and the first ``groups`` consumers for
    ``seconds``, ``sample`` called about every second meanwhile."""
    start = {"batch": "1", "rp": "-1", **{f"rp{g}": "-1" for g in range(G)}, **system.start}
    start |= resumed
    procs = [launch(env, dsn, system.push, seconds, start, push_sync)]
    procs += [launch(env, dsn, system.pops[g], seconds, start, "off") for g in range(groups)]
    deadline = time.monotonic() + seconds + 60
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        sample()
        time.sleep(1.0)
    finish(procs)


def measure(
    env: BenchEnv, system: System, seconds: float, lag_seconds: float, push_sync: str
) -> dict[str, Any]:
    """One system: the steady run, then a lagging last group."""
    dsn = env.database(f"fanout_{system.key.replace('-', '_')}")
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for statement in system.setup:
                conn.execute(statement)
            conn.execute("SELECT pg_stat_force_next_flush()")
            time.sleep(0.5)
            before, wal0, pos0 = stats(conn), lsn(conn), positions(conn, system)
            samples: list[tuple[float, int]] = []
            t0 = time.monotonic()

            def sample() -> None:
                samples.append((round(time.monotonic() - t0, 1), total_bytes(conn)))

            run_roles(env, dsn, system, seconds, G, sample, push_sync, {})
            elapsed = time.monotonic() - t0
            time.sleep(1.5)  # the backends' statistics reach the collector when they exit
            wal1, after, pos1 = lsn(conn), stats(conn), positions(conn, system)
            got = [b - a for a, b in zip(delivered(pos0), delivered(pos1), strict=True)]
            # The lagging group: the last group's consumer stopped, the others go on.
            resumed = {}
            if system.resume:
                cur = conn.execute(line(system.resume))
                names = [c.name for c in cur.description or ()]
                resumed = dict(zip(names, (str(v) for v in cur.fetchone() or ()), strict=True))
            run_roles(env, dsn, system, lag_seconds, G - 1, lambda: None, push_sync, resumed)
            pos2 = positions(conn, system)
            named = (
                conn.execute(line(system.blocking)).fetchone()[0]  # type: ignore[index]
                if system.blocking
                else None
            )
            lag = {
                "positions": [pos0, pos1, pos2],
                "blocking": named,
                "pushed": [b - a for a, b in zip(pos1["pushed"], pos2["pushed"], strict=True)],
                "behind": [p - d for p, d in zip(pos2["pushed"], delivered(pos2), strict=True)],
            }
    finally:
        env.drop(f"fanout_{system.key.replace('-', '_')}")
    tables = {
        name: {k: after[name][k] - before.get(name, {}).get(k, 0) for k in after[name]}
        | {"bytes_start": before.get(name, {}).get("bytes", 0), "bytes_end": after[name]["bytes"]}
        for name in after
    }
    per_group = [n / elapsed for n in got]
    messages = sum(got) / G
    upd = sum(t["upd"] for t in tables.values())
    return {
        "label": system.label,
        "prototype": system.prototype,
        "seconds": round(elapsed, 1),
        "delivered": got,
        "msg_per_s_per_group": [round(x, 1) for x in per_group],
        "msg_per_s_min_group": round(min(per_group), 1),
        "pushes_per_s": round(
            sum(b - a for a, b in zip(pos0["pushed"], pos1["pushed"], strict=True)) / G / elapsed,
            1,
        ),
        "wal_bytes": wal1 - wal0,
        "wal_bytes_per_message": round((wal1 - wal0) / messages) if messages else None,
        "bytes_start": sum(before.get(n, {}).get("bytes", 0) for n in after),
        "bytes_end": sum(t["bytes"] for t in after.values()),
        "bytes_samples": samples,
        "updates": upd,
        "hot_updates": sum(t["hot"] for t in tables.values()),
        "hot_ratio": round(sum(t["hot"] for t in tables.values()) / upd, 4) if upd else None,
        "inserts": sum(t["ins"] for t in tables.values()),
        "deletes": sum(t["del"] for t in tables.values()),
        "dead_tuples_end": sum(t["dead"] for t in after.values()),
        "autovacuums": sum(t["autovacuums"] for t in tables.values()),
        "tables": tables,
        "lag": lag,
    }


# -- the report --------------------------------------------------------------------------------


def kib(n: int) -> str:
    """``n`` bytes in KiB, for the report."""
    return f"{n / 1024:,.0f} KiB"


def markdown(meta: dict[str, Any], results: dict[str, dict[str, Any]], capacity: int) -> str:
    """The report: one table of figures, ratios to the like-for-like baseline, the lagging
    group, and the decision (``--decision``, a file of Markdown, appended as it is)."""
    base = results.get("ring-min-x3")
    lines = [
        "# Fan-out consumer groups on the ring (issue 22 §1)",
        "",
        f"Run {meta['started']}, {meta['seconds']} s in all; `python -m bench.ring_fanout "
        f"--seconds {meta['run_seconds']:g} --push-sync {meta['push_sync']}`. {G} groups "
        f"({', '.join(GROUPS)}); 1 pusher "
        f"(single messages) and 1 consumer per group (pop + ack of one message), each a "
        f"pgbench process, {meta['run_seconds']:g} s per system; rings of {capacity:,} slots; "
        "payload 300 characters. Server: "
        f"{meta['server']}, autovacuum {meta['settings'].get('autovacuum')}, "
        f"autovacuum_naptime {meta['naptime']}. Load average (1 min) at the start and the end: "
        f"{meta['load'][0]:.1f}, {meta['load'][1]:.1f} on {meta['cpus']} CPUs (shared with "
        f"another engineer's tests; run under nice -n 10). dbqueue source: {meta['source']}.",
        "",
        "One run per system (a spike): absolute rates drift on a shared machine (up to 30 % "
        "between two runs here); read the ratios between rows, measured minutes apart on the "
        "same server, and compare repeated runs.",
        "",
        "## Figures",
        "",
        "| system | msg/s per group (slowest) | per group | pushes/s | WAL B/msg | bytes start "
        "→ end | updates | HOT | inserts / deletes | dead tuples at end | autovacuums |",
        "|---|---:|---|---:|---:|---|---:|---:|---|---:|---:|",
    ]
    for key, r in results.items():
        hot = f"{r['hot_ratio'] * 100:.1f} %" if r["hot_ratio"] is not None else "n/a"
        lines.append(
            f"| {key}: {r['label']} | {r['msg_per_s_min_group']:,.0f} | "
            f"{' / '.join(f'{x:,.0f}' for x in r['msg_per_s_per_group'])} | "
            f"{r['pushes_per_s']:,.0f} | {r['wal_bytes_per_message'] or 0:,} | "
            f"{kib(r['bytes_start'])} → {kib(r['bytes_end'])} | {r['updates']:,} | {hot} | "
            f"{r['inserts']:,} / {r['deletes']:,} | {r['dead_tuples_end']:,} | "
            f"{r['autovacuums']} |"
        )
    if base:
        lines += [
            "",
            "## Ratios to a ring per group (ring-min-x3: the same minimal statements, "
            "three copies)",
            "",
            "| system | throughput (slowest group) | WAL per message | bytes at end |",
            "|---|---:|---:|---:|",
        ]
        for key, r in results.items():
            thr = r["msg_per_s_min_group"] / base["msg_per_s_min_group"]
            wal = (r["wal_bytes_per_message"] or 0) / (base["wal_bytes_per_message"] or 1)
            size = r["bytes_end"] / base["bytes_end"]
            lines.append(f"| {key} | {thr:.2f}x | {wal:.2f}x | {size:.2f}x |")
    lines += [
        "",
        "## Table size during the run (bytes of all the system's tables, sampled each second)",
        "",
    ]
    for key, r in results.items():
        shown = [kib(b) for _, b in r["bytes_samples"][:: max(1, len(r["bytes_samples"]) // 6)]]
        laps = sum(r["delivered"]) / G / capacity
        lines.append(f"- {key} ({laps:,.1f} laps of the ring): {' → '.join(shown)}")
    lines += [
        "",
        f"## A lagging group: {meta['lag_seconds']:g} s with {GROUPS[-1]}'s consumer stopped",
        "",
        "| system | pushed meanwhile (per group) | messages behind per group at the end | "
        "groups holding the blocked pusher's slot |",
        "|---|---|---|---|",
    ]
    for key, r in results.items():
        lag = r["lag"]
        lines.append(
            f"| {key} | {' / '.join(f'{x:,}' for x in lag['pushed'])} | "
            f"{' / '.join(f'{GROUPS[g]} {x:,}' for g, x in enumerate(lag['behind']))} | "
            f"{lag.get('blocking') or 'n/a'} |"
        )
    lines.append("")
    if meta.get("decision"):
        lines += [meta["decision"].rstrip(), ""]
    return "\n".join(lines)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.ring_fanout", description=__doc__)
    p.add_argument("--seconds", type=float, default=20.0, help="steady run per system")
    p.add_argument("--lag-seconds", type=float, default=3.0, help="lagging-group run per system")
    p.add_argument("--capacity", type=int, default=2000, help="slots of every ring")
    p.add_argument(
        "--push-sync",
        choices=("on", "off"),
        default="off",
        help="the pushes' synchronous_commit (pops and acks: off); on makes every system wait "
        "for the pusher's WAL flush, off measures what the layouts cost",
    )
    p.add_argument("--systems", default="", help="comma-separated keys (default: all)")
    p.add_argument("--decision", type=Path, help="Markdown appended to the report as it is")
    p.add_argument(
        "--out", type=Path, help="report stem (default bench/reports/<date>-ring-fanout)"
    )
    p.add_argument(
        "--render",
        type=Path,
        help="no run: write the Markdown again from this JSON (and --decision)",
    )
    return p.parse_args(argv)


def render_again(path: Path, decision: Path | None) -> int:
    """The report's Markdown written again from its JSON, with ``decision`` (if given)."""
    data = json.loads(path.read_text())
    if decision:
        data["meta"]["decision"] = decision.read_text()
        path.write_text(json.dumps(data, indent=1))
    path.with_suffix(".md").write_text(
        markdown(data["meta"], data["results"], data["meta"]["capacity"])
    )
    print(f"report: {path.with_suffix('.md')}")
    return 0


def main(argv: list[str]) -> int:
    args = parse(argv)
    if args.render:
        return render_again(args.render, args.decision)
    systems = [build(args.capacity) for build in BUILDERS]
    if args.systems:
        wanted = set(args.systems.split(","))
        systems = [s for s in systems if s.key in wanted]
    env = bench_env.start(quick=False, sync_commit=True, scale=None)
    started, t0, load = dt.datetime.now(dt.UTC), time.perf_counter(), os.getloadavg()[0]
    code = report.source()
    results: dict[str, dict[str, Any]] = {}
    for system in systems:
        results[system.key] = measure(env, system, args.seconds, args.lag_seconds, args.push_sync)
        r = results[system.key]
        print(
            f"{system.key}: {r['msg_per_s_per_group']} msg/s per group, "
            f"{r['wal_bytes_per_message']} WAL B/msg, HOT {r['hot_ratio']}",
            flush=True,
        )
    described = env.describe()
    with psycopg.connect(env.admin_dsn) as conn:
        naptime = conn.execute("SHOW autovacuum_naptime").fetchone()[0]  # type: ignore[index]
    meta = {
        "started": f"{started:%Y-%m-%d %H:%M} UTC",
        "seconds": round(time.perf_counter() - t0, 1),
        "run_seconds": args.seconds,
        "lag_seconds": args.lag_seconds,
        "push_sync": args.push_sync,
        "capacity": args.capacity,
        "groups": list(GROUPS),
        "server": f"{described['server']}, PostgreSQL {described['postgresql']['server_version']}",
        "settings": described["postgresql"],
        "naptime": naptime,
        "load": [load, os.getloadavg()[0]],
        "cpus": os.cpu_count(),
        "source": code,
        "versions": report.versions(),
        "decision": args.decision.read_text() if args.decision else None,
    }
    stem = args.out or REPORTS / f"{started:%Y-%m-%d}-ring-fanout"
    stem.parent.mkdir(parents=True, exist_ok=True)
    scripts = {s.key: {"push": s.push, "pops": s.pops, "setup": s.setup} for s in systems}
    stem.with_suffix(".json").write_text(
        json.dumps({"meta": meta, "results": results, "scripts": scripts}, indent=1)
    )
    stem.with_suffix(".md").write_text(markdown(meta, results, args.capacity))
    print(f"report: {stem.with_suffix('.md')} ({meta['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
