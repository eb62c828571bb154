"""The ring's physical references: pgbench (``-M prepared``) running the statements of the
pairs and cycle workloads with zero Python, so each Python system can be set beside the SQL it
runs, and the cost of crash safety beside a minimal ring.

Systems (as the report names them):

* ``pgbench-ring``: dbqueue's own ring statements, at least once: ``ring_push`` (or
  ``ring_push_many``), ``ring_pop_leased`` (its ``_held`` variant while the client holds claims
  it did not take, as the Python popper does; the claims travel in a pgbench variable), and
  ``ring_ack``;
* ``pgbench-ring-amo``: the same pushes popped at most once (``ring_pop_remove``);
* ``pgbench-split``: the split queue's ``split_push``, ``split_pop_leased``, ``split_ack``;
* ``pgbench-naive``: the naive queue (INSERT; DELETE the lowest ids ... FOR UPDATE);
* ``pgbench-kejser``: the minimal ring of Kejser's article: push = ``nextval`` + ``UPDATE ...
  WHERE slot = p % C AND state = empty``, pop = ``nextval`` + ``UPDATE ... RETURNING``. No
  claims, holes, leases or fencing: with more than one client a pop that meets a push still in
  flight strands its message for ever, and the ring jams, so it runs with one client only.

Each client of a pair does what a Python pair does: push a message (or 100), then take as many
and settle them. Figures are messages per second, median of ``repeat`` runs from a fresh queue.
"""

from __future__ import annotations

import os
import re
from typing import Any

import psycopg

from bench import pgbench
from bench.env import BenchEnv
from bench.measure import Measurement
from bench.systems.dbqueue_core import SPEC as SPLIT_SPEC
from bench.systems.dbqueue_ring import RING_TABLE, ring_spec
from dbqueue import RingQueue, SplitQueue, get_dialect
from dbqueue.ring.states import SlotState
from dbqueue.schema import create_ring_statements, create_statements, drop_ring_statements

POSTGRESQL = get_dialect("postgresql")
#: Twice the most messages a pairs run keeps in flight (4 pairs x 2 batches of 100), as the
#: Python systems' rings get (bench/systems/dbqueue_ring.py): in 1,000 slots the ring's own
#: statements collapsed at 4 pairs of 100 (13,468 msg/s) as the Python API's had.
CAPACITY = 2000
_PARAM = re.compile(r"%\((\w+)\)[sb]")
#: pgbench variables every script starts with (-D): no claims held, nothing to ack.
START = {"nheld": "0", "nlanded": "0", "held": "{}", "ids": "{}", "atts": "{}"}
#: What a 300-character payload and the run's parameters are in a pgbench script.
LITERALS = {
    "p0": "repeat('x', 300)",
    "c0": "array_fill(repeat('x', 300), ARRAY[:batch::int])",
    "ps": "array_fill(NULL::bigint, ARRAY[:batch::int])",
    "count": ":batch",
    "n": ":batch",
    # New claims: as the Python popper takes them, fewer by the held claims whose message
    # has landed (taken before any new one). Claiming a whole batch on top of those made the
    # held claims pile up at 2 pairs of 100: 19,288 msg/s against 124,072 in a run that did
    # not pile up.
    "k": "GREATEST(0, :batch::bigint - :nlanded::bigint)",
    "held": ":held::bigint[]",
    "ids": ":ids::bigint[]",
    "attempts": ":atts::smallint[]",
    "p": "NULL",
    "priority": "0",
    "run_at": "NULL",
    "delay": "'0 seconds'",
    "lease": "'30 seconds'",
    "strict": "false",
    "capacity": str(CAPACITY),
    # As the Python API passes it for a statement that is its own transaction (see
    # QueueOptions.durable_acks): at-least-once pops and acks do not wait for their flush.
    "commit": "'off'",
}


def render(queue: SplitQueue | RingQueue, name: str) -> str:
    """A statement of ``queue`` with pgbench variables and literals for its parameters, on
    one line (pgbench reads a statement up to the end of its line before a meta-command)."""
    text = queue.statements[name].parts[0]
    return " ".join(_PARAM.sub(lambda m: LITERALS[m.group(1)], text).split())


def aggregated(statement: str, main: str, select: str) -> str:
    """``statement`` (``WITH ... <main> ...``) with its main query made one more CTE, ``x``,
    and ``select`` over it as the main query: data-modifying CTEs must stay at the top level."""
    at = statement.rindex(f") {main}")
    return f"{statement[: at + 1]}, x AS ({statement[at + 2 :]}) {select}"


def settled(pop: str) -> str:
    """A ring pop whose one row keeps (``\\gset``) what the next statements need: the claims
    it did not take (held for the next pop; how many, and how many of them have landed), and
    the numbers and attempts it took."""
    landed = f"NOT taken AND slot_seq = number AND slot_state = {int(SlotState.READY)}"
    return aggregated(
        pop,
        "SELECT u.seq AS number",
        "SELECT coalesce(array_agg(number) FILTER (WHERE NOT taken), '{}') AS held, "
        "count(*) FILTER (WHERE NOT taken) AS nheld, "
        f"count(*) FILTER (WHERE {landed}) AS nlanded, "
        "coalesce(array_agg(number) FILTER (WHERE taken), '{}') AS ids, "
        "coalesce(array_agg(attempts) FILTER (WHERE taken), '{}') AS atts FROM x",
    )


def ring_script(batch: int, *, leased: bool) -> str:
    """One pair's cycle on the ring, as the Python popper runs it."""
    ring = RingQueue(ring_spec(CAPACITY), POSTGRESQL)
    push = render(ring, "ring_push" if batch == 1 else "ring_push_many")
    pop = "ring_pop_leased" if leased else "ring_pop_remove"
    lines = [
        f"{push};",
        "\\if :nheld = 0",
        settled(render(ring, pop)),
        "\\gset",
        "\\else",
        settled(render(ring, f"{pop}_held")),
        "\\gset",
        "\\endif",
    ]
    if leased:
        lines.append(f"{render(ring, 'ring_ack')};")
    return "\n".join(lines) + "\n"


def split_script(batch: int) -> str:
    split = SplitQueue(SPLIT_SPEC, POSTGRESQL)
    push = render(split, "split_push" if batch == 1 else "split_push_many")
    pop = render(split, "split_pop_leased")
    taken = aggregated(
        pop,
        "SELECT m.id, m.attempts",
        "SELECT coalesce(array_agg(id), '{}') AS ids, "
        "coalesce(array_agg(attempts), '{}') AS atts FROM x",
    )
    return f"{push};\n{taken}\n\\gset\n{render(split, 'split_ack')};\n"


def naive_script(batch: int) -> str:
    push = "INSERT INTO naive_q (payload) " + (
        "VALUES (repeat('x', 300));"
        if batch == 1
        else "SELECT unnest(array_fill(repeat('x', 300), ARRAY[:batch::int]));"
    )
    pop = (
        "DELETE FROM naive_q WHERE id IN (SELECT id FROM naive_q ORDER BY id LIMIT :batch "
        "FOR UPDATE) RETURNING payload;"
    )
    return f"{push}\n{pop}\n"


def kejser_script() -> str:
    ring = f'"{RING_TABLE}"'
    seq = f"'\"{RING_TABLE}_push_seq\"'", f"'\"{RING_TABLE}_pop_seq\"'"
    push = (
        f"WITH n AS (SELECT nextval({seq[0]}) AS p) UPDATE {ring} AS t "
        f"SET seq = n.p, state = 1, payload = repeat('x', 300) "
        f"FROM n WHERE t.slot = mod(n.p, {CAPACITY}) AND t.state = 0;"
    )
    pop = (
        f"WITH n AS (SELECT nextval({seq[1]}) AS q) UPDATE {ring} AS t SET state = 0 FROM n "
        f"WHERE t.slot = mod(n.q, {CAPACITY}) AND t.seq = n.q AND t.state = 1 "
        "RETURNING t.payload;"
    )
    return f"{push}\n{pop}\n"


def run(
    env: BenchEnv, dsn: str, script: str, clients: int, seconds: float, batch: int, sync: str
) -> float:
    """Transactions per second of ``script`` with ``clients`` clients."""
    # The DSN on the command line names no password (pgbench reads PGPASSWORD if one is set).
    environ = {**os.environ, "PGOPTIONS": f"-c synchronous_commit={sync}"}
    variables = {**START, "batch": str(batch)}
    return pgbench.run(
        env, dsn, script, clients, seconds, variables=variables, environ=environ, timeout=900
    )


def _reset(conn: psycopg.Connection[Any], system: str) -> None:
    """A fresh queue for ``system``'s next run."""
    spec = ring_spec(CAPACITY)
    for statement in drop_ring_statements(spec, POSTGRESQL):
        conn.execute(statement)
    for statement in create_ring_statements(spec, POSTGRESQL):
        conn.execute(statement)
    conn.execute(f"TRUNCATE {SPLIT_SPEC.table}, {SPLIT_SPEC.meta_table}, naive_q")


SCRIPTS = {
    "pgbench-ring": lambda batch: ring_script(batch, leased=True),
    "pgbench-ring-amo": lambda batch: ring_script(batch, leased=False),
    "pgbench-split": split_script,
    "pgbench-naive": naive_script,
}


def measure(env: BenchEnv, pairs: tuple[int, ...], seconds: float) -> list[Measurement]:
    """Every reference of the pairs workload (same pair counts, batches and
    synchronous_commit settings as the Python runs), and the minimal ring with one client."""
    dsn = env.database("ring_pgbench")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in create_statements(SPLIT_SPEC, POSTGRESQL):
            conn.execute(statement)
        conn.execute(
            "CREATE TABLE naive_q (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
            "payload text NOT NULL)"
        )
        cases: list[tuple[str, str, int, int, str]] = [
            (system, script(batch), count, batch, sync)
            for sync in ("on", "off")
            for batch in (1, 100)
            for count in pairs
            for system, script in SCRIPTS.items()
        ]
        cases += [("pgbench-kejser", kejser_script(), 1, 1, sync) for sync in ("on", "off")]
        out = []
        for system, script, count, batch, sync in cases:
            runs = []
            for _ in range(env.process_repeat):
                _reset(conn, system)
                runs.append(run(env, dsn, script, count, seconds, batch, sync) * batch)
            params = {"pairs": count, "batch": batch, "sync_commit": sync}
            out.append(Measurement(system, "pairs", params, runs, extra={"seconds": seconds}))
            print(f"{system} {params}: {out[-1].median:,.0f} msg/s", flush=True)
    env.drop("ring_pgbench")
    return out
