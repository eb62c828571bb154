"""The physical reference: pgbench running dbqueue's own statements (what the database does
with zero Python), and ``SELECT 1`` round trips. Same client counts as the Python runs."""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from bench.env import BenchEnv, libpq_environ
from bench.measure import Measurement
from bench.systems.dbqueue_core import SPEC
from dbqueue import SplitQueue, get_dialect
from dbqueue.schema import create_statements

NAME = "pgbench"
_TPS = re.compile(r"tps = ([0-9.]+)")
_PARAM = re.compile(r"%\((\w+)\)[sb]")


def our_sql(statement: str, batch: int = 1) -> str:
    """A split-queue statement with its parameters replaced by the literals the Python runs
    bind (a 300-character payload, priority 0, no delay)."""
    values = {
        "p0": "repeat('x', 300)",
        "c0": f"array_fill(repeat('x', 300), ARRAY[{batch}])",
        "count": str(batch),
        "n": str(batch),
        "priority": "0",
        "run_at": "NULL",
        "delay": "'0 seconds'",
        "lease": "'30 seconds'",
    }
    queue = SplitQueue(SPEC, get_dialect("postgresql"))
    text = queue.statements[statement].parts[0]
    return _PARAM.sub(lambda m: values[m.group(1)], text) + ";\n"


def run(
    env: BenchEnv,
    dsn: str,
    script: str,
    clients: int,
    seconds: float,
    *,
    variables: dict[str, str] | None = None,
    environ: dict[str, str] | None = None,
    timeout: float = 600,
) -> float:
    """Transactions per second of ``script`` (pgbench -M prepared), with pgbench
    ``variables`` (-D) and the process environment ``environ``."""
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(script)
    defines = [arg for k, v in (variables or {}).items() for arg in ("-D", f"{k}={v}")]
    cmd = [
        str(env.pg_bin / "pgbench"), "-n", "-M", "prepared", "-c", str(clients),
        "-j", str(clients), "-T", str(max(1, round(seconds))), *defines, "-f", f.name,
    ]  # fmt: skip
    try:
        out = subprocess.run(
            cmd, capture_output=True, text=True, check=True, timeout=timeout,
            env=libpq_environ(dsn, environ),  # the DSN, password included, stays off ps
        )  # fmt: skip
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(f"pgbench failed: {exc.stderr.strip()[-2000:]}") from exc
    finally:
        Path(f.name).unlink(missing_ok=True)
    match = _TPS.search(out.stdout)
    if not match:
        raise RuntimeError(f"pgbench printed no tps: {out.stdout}")
    return float(match.group(1))


def measure(env: BenchEnv, repeat: int) -> list[Measurement]:
    """Every pgbench figure of the run."""
    dsn = env.database("pgbench")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in create_statements(SPEC, get_dialect("postgresql")):
            conn.execute(statement)
    seconds = 1.0 if env.quick else 10.0
    cases = [
        ("roundtrip", {"clients": 1}, "SELECT 1;\n", 1, 1),
        ("roundtrip", {"clients": 2}, "SELECT 1;\n", 2, 1),
        ("push_single", {"clients": 1}, our_sql("split_push"), 1, 1),
        ("push_batch", {"batch": 100}, our_sql("split_push_many", 100), 1, 100),
        ("push_batch", {"batch": 1000}, our_sql("split_push_many", 1000), 1, 1000),
    ]
    cycle = our_sql("split_push_many", 100) + our_sql("split_pop_remove", 100)
    cases += [("cycle", {"workers": w, "batch": 100}, cycle, w, 100) for w in (1, 2)]
    out = []
    for workload, params, script, clients, per_tx in cases:
        runs = []
        for _ in range(env.process_repeat):
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f"TRUNCATE {SPEC.table}, {SPEC.meta_table}")
            runs.append(run(env, dsn, script, clients, seconds) * per_tx)
        unit = "round trips/s" if workload == "roundtrip" else "msg/s"
        out.append(Measurement(NAME, workload, params, runs, unit=unit, extra={"seconds": seconds}))
    env.drop("pgbench")
    return out


def python_roundtrips(env: BenchEnv, repeat: int) -> Measurement:
    """``SELECT 1`` from a thin psycopg loop, one client: the Python client's floor."""
    dsn = env.database("roundtrip")
    n = env.size(20_000, 2_000)
    runs = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.cursor()
        for _ in range(env.repeat):
            start = time.perf_counter()
            for _ in range(n):
                cur.execute("SELECT 1", prepare=True)
            runs.append(n / (time.perf_counter() - start))
    env.drop("roundtrip")
    return Measurement("thin", "roundtrip", {"clients": 1}, runs, unit="round trips/s")
