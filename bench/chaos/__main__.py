"""``python -m bench.chaos [--minutes M] [--out DIR]``: the chaos run (see :mod:`bench.chaos`).

For M minutes, on a cluster of its own: two producers and two workers per queue (a split
queue and a ring), and a transactional consumer of a third queue with its producer, while
the run, every few seconds, kills a worker with SIGKILL (and starts another), restarts the
server with ``pg_ctl restart -m immediate``, stops a worker with SIGSTOP past its lease,
holds a REPEATABLE READ transaction for a while, or makes REPEATABLE READ the database's
default isolation level for ``RR_SECONDS`` and ends every session (each process reconnects
at that level: its pops, acks, pushes, rescues, the upkeep of its worker or keeper, and the
transactional consumer's transactions; sessions opened meanwhile keep it after the reset).
All along, the dumper takes a ``pg_dump`` every few seconds, in a database where ``FILLERS``
other tables come before the queues' (pg_dump locks them late), and checks that each dump
holds every message pushed before it started and not taken before its snapshot (among them
``HELD_BACK`` messages of the split queue, due once the faults end). Then the producers
stop, the queues drain, the workers stop, and :mod:`bench.chaos.check` judges every queue and
the dumps. It prints a table, writes ``chaos.md`` and ``chaos.json`` to the output folder,
and exits 1 if a check failed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg

from bench.chaos import actors
from bench.chaos.check import Verdict, judge, read_deliveries, read_dumps, read_pushes
from bench.chaos.cluster import Cluster
from bench.env import child_environ
from bench.pgtools import pg_program
from dbqueue.drivers.psycopg import PsycopgExecutor
from dbqueue.schema import create_ring_statements, create_statements

ROOT = Path(__file__).resolve().parents[2]
LAYOUTS = ("split", "ring")
FAULTS = ("kill", "restart", "stop", "long_tx", "repeatable_read")
#: One round of faults, dealt in a shuffled order: kills the most (the common crash), and
#: every kind in every round, so a 10-minute run has its 30 kills and 5 restarts for sure.
ROUND = ("kill", "kill", "kill", "stop", "long_tx", "restart", "repeatable_read")
#: Seconds the database's default isolation level stays REPEATABLE READ after a
#: ``repeatable_read`` fault (other faults go on meanwhile: kills, restarts...).
RR_SECONDS = 20.0
DRAIN_PATIENCE = 180.0
#: Messages pushed into the split queue before the faults, due only once they end: the workers
#: take every other message within moments, these are in every dump.
HELD_BACK = 2_000
#: How the report names the queue consumed by transactional pops.
TX_QUEUE = "split, transactional pops"
#: Tables created before the queues': a pg_dump locks the tables it dumps one by one after
#: taking its snapshot, the queues' after these (what a compaction of old had time to empty).
FILLERS = 300


class Run:
    """The processes of a chaos run and what befell them."""

    def __init__(self, cluster: Cluster, logs: Path) -> None:
        self.cluster, self.logs = cluster, logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.counts = dict.fromkeys(FAULTS, 0)
        self.rng = random.Random(16)
        self._dealt: list[str] = []
        #: When the REPEATABLE READ default is to be reset (monotonic), if it is set.
        self._rr_until: float | None = None

    def start(self, name: str, role: str, layout: str, *extra: str) -> None:
        log = self.logs / f"{name}.log"
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "bench.chaos.actors", role, layout, str(log), *extra],
            cwd=ROOT, stdout=(self.logs / f"{name}.out").open("wb"), stderr=subprocess.STDOUT,
            env=child_environ(self.cluster.dsn),
        )  # fmt: skip

    def workers(self) -> list[str]:
        return [n for n, p in self.procs.items() if n.startswith("worker") and p.poll() is None]

    def fault(self) -> str:
        """Inflict the next fault of the shuffled round (see ROUND)."""
        if not self._dealt:
            self._dealt = self.rng.sample(ROUND, len(ROUND))
        fault = self._dealt.pop()
        victim = self.rng.choice(self.workers())
        if fault == "kill":
            proc = self.procs[victim]
            proc.kill()
            proc.wait()
            layout = victim.split("-")[1]
            self.start(f"{victim}+", "worker", layout)  # its replacement
        elif fault == "restart":
            self.cluster.restart_immediate()
        elif fault == "stop":
            proc = self.procs[victim]
            proc.send_signal(signal.SIGSTOP)
            time.sleep(actors.LEASE.total_seconds() + 1.0)  # past its lease
            proc.send_signal(signal.SIGCONT)
        elif fault == "repeatable_read":
            self.cluster.default_isolation("repeatable read")
            self.cluster.end_sessions(sparing=actors.DUMP_APPLICATION)  # the dumps go on
            self._rr_until = time.monotonic() + RR_SECONDS
        else:
            _hold_a_snapshot(self.cluster.dsn, seconds=5.0)
        self.counts[fault] += 1
        return fault

    def reset_isolation(self, *, now: bool = False) -> None:
        """Give the database its default isolation level back once ``RR_SECONDS`` have
        passed since the last ``repeatable_read`` fault (``now``: at once, if it is set)."""
        if self._rr_until is not None and (now or time.monotonic() >= self._rr_until):
            self.cluster.default_isolation(None)
            self._rr_until = None

    def stop(self, names: list[str]) -> None:
        """Stop processes: each by its stop file; workers by SIGTERM too (a producer must not
        die between a push that returned and the line that records it)."""
        for name in names:
            (self.logs / f"{name}.log.stop").touch()
            proc = self.procs[name]
            if proc.poll() is None and name.startswith("worker"):
                proc.send_signal(signal.SIGTERM)
        for name in names:
            try:
                self.procs[name].wait(60)
            except subprocess.TimeoutExpired:
                self.procs[name].kill()


def _hold_a_snapshot(dsn: str, seconds: float) -> None:
    """A REPEATABLE READ transaction on an unrelated table, held for ``seconds`` (it pins the
    xmin horizon: vacuum reclaims nothing meanwhile)."""
    try:
        with psycopg.connect(dsn, connect_timeout=2) as conn:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            conn.execute("SELECT count(*) FROM chaos_done")
            time.sleep(seconds)
    except psycopg.OperationalError:
        pass  # the server restarted meanwhile


def _setup(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f"DO $$ BEGIN FOR i IN 1..{FILLERS} LOOP "
            "EXECUTE format('CREATE TABLE chaos_filler_%s (id int PRIMARY KEY)', i); "
            "END LOOP; END $$"
        )
        for layout in (*LAYOUTS, "tx"):
            q = actors.queue(layout)
            make = create_ring_statements if layout == "ring" else create_statements
            for statement in make(q.spec, q.dialect):
                conn.execute(statement)
        conn.execute("CREATE TABLE chaos_done (key text NOT NULL)")


def _push_held_back(dsn: str, logs: Path, due: dt.datetime) -> None:
    """``HELD_BACK`` messages into the split queue, due at ``due``, logged as a producer's."""
    keys = [f"held:{n}" for n in range(HELD_BACK)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        actors.queue("split").push_many(
            PsycopgExecutor(conn), [{"key": k} for k in keys], run_at=due
        )
    (logs / "producer-split-held.log").write_text("".join(f"+{k}\n" for k in keys))


def _ring_size(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_total_relation_size('chaos_ring')").fetchone()
        return int(row[0]) if row else 0


def _drained(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
        ex = PsycopgExecutor(conn)
        for layout in (*LAYOUTS, "tx"):
            q = actors.queue(layout)
            q.rescue(ex)
            stats = q.stats(ex)
            if stats.ready + stats.leased + stats.scheduled + stats.expired:
                return False
    return True


def _wait_drained(dsn: str) -> bool:
    deadline = time.monotonic() + DRAIN_PATIENCE
    while time.monotonic() < deadline:
        try:
            if _drained(dsn):
                return True
        except psycopg.OperationalError:
            pass
        time.sleep(1.0)
    return False


def run(minutes: float, out: Path) -> int:
    cluster = Cluster()
    logs = Path(tempfile.mkdtemp(prefix="dbqueue-chaos-logs-"))
    started = dt.datetime.now(dt.UTC)
    try:
        _setup(cluster.dsn)
        due = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=minutes, seconds=10)
        _push_held_back(cluster.dsn, logs, due)
        size_before = _ring_size(cluster.dsn)
        r = Run(cluster, logs)
        for layout in LAYOUTS:
            for i in range(2):
                r.start(f"producer-{layout}-{i}", "producer", layout, f"{layout}{i}")
                r.start(f"worker-{layout}-{i}", "worker", layout)
        r.start("producer-tx-0", "producer", "tx", "tx0")
        r.start("consumer-tx-0", "transactional", "tx")
        tools = [str(pg_program(name, cluster.dsn)) for name in ("pg_dump", "pg_restore")]
        r.start("dumper", "dumper", "all", *tools)
        deadline = time.monotonic() + minutes * 60
        faults: list[str] = []
        while time.monotonic() < deadline:
            time.sleep(r.rng.uniform(2.0, 5.0))
            r.reset_isolation()
            faults.append(r.fault())
            print(f"{time.monotonic() - deadline + minutes * 60:6.1f} s  {faults[-1]}", flush=True)
        r.reset_isolation(now=True)
        r.stop([n for n in r.procs if n.startswith(("producer", "dumper"))])
        drained = _wait_drained(cluster.dsn)
        r.stop([n for n in r.procs if not n.startswith(("producer", "dumper"))])
        size_after = _ring_size(cluster.dsn)
        verdicts = _judge(r, logs, cluster.dsn)
        dumps = read_dumps(logs / "dumper.log")
        compactions = {
            layout: sum(
                len(path.read_text(encoding="utf-8").splitlines())
                for path in logs.glob(f"worker-{layout}-*.log{actors.COMPACTIONS_SUFFIX}")
            )
            for layout in LAYOUTS
        }
    finally:
        try:
            cluster.stop()
        except Exception as exc:
            print(f"could not stop the cluster: {exc}", file=sys.stderr)
    summary = {
        "started": started.isoformat(timespec="seconds"),
        "minutes": minutes,
        "faults": r.counts,
        "drained": drained,
        "ring_size_before": size_before,
        "ring_size_after": size_after,
        "verdicts": [v.as_dict() for v in verdicts],
        "dumps": dumps.as_dict(),
        "compactions": compactions,
    }
    _report(summary, out)
    return 0 if drained and all(v.ok for v in verdicts) and dumps.ok else 1


def _judge(r: Run, logs: Path, dsn: str) -> list[Verdict]:
    # A worker's handled-but-unacked items come back when its lease expires: a killed worker
    # held up to two batches (the one in hand, the one handled and not acked yet), a stopped
    # worker one, and a restart may cost every worker of a queue both; so may the sessions
    # a repeatable_read fault ends.
    batch = actors.BATCH
    ended = r.counts["restart"] + r.counts["repeatable_read"]
    allowed = batch * (2 * r.counts["kill"] + r.counts["stop"] + 4 * ended)
    verdicts = []
    for layout in LAYOUTS:
        pushed, uncertain = read_pushes(logs.glob(f"producer-{layout}-*.log"))
        delivered = read_deliveries(logs.glob(f"worker-{layout}-*.log"))
        verdicts.append(judge(layout, pushed, uncertain, delivered, allowed))
    pushed, uncertain = read_pushes(logs.glob("producer-tx-*.log"))
    with psycopg.connect(dsn, autocommit=True) as conn:
        keys = [row[0] for row in conn.execute("SELECT key FROM chaos_done")]
    verdicts.append(judge(TX_QUEUE, pushed, uncertain, Counter(keys), 0))
    return verdicts


def _report(summary: dict[str, Any], out: Path) -> None:
    lines = [
        "# Chaos run",
        "",
        f"Started {summary['started']}, {summary['minutes']} minutes of faults, then a drain "
        f"({'complete' if summary['drained'] else 'INCOMPLETE'}). Faults: "
        + ", ".join(f"{n} {k}" for k, n in summary["faults"].items())
        + ".",
        "",
        "| queue | pushed | uncertain | delivered | distinct | lost | unexpected | duplicates "
        "| allowed | ok |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for v in summary["verdicts"]:
        lines.append(
            f"| {v['queue']} | {v['pushed']:,} | {v['uncertain']:,} | {v['delivered']:,} "
            f"| {v['distinct']:,} | {v['lost']:,} | {v['unexpected']:,} | {v['duplicates']:,} "
            f"| {v['allowed_duplicates']:,} | {'yes' if v['ok'] else 'NO'} |"
        )
    d = summary["dumps"]
    lines += [
        "",
        f"pg_dump: {d['taken']:,} dumps taken, {d['failed']:,} failed (the server restarted "
        f"under them), {d['checked']:,} checked: each must hold every message pushed before it "
        f"started and not taken before its snapshot ({d['early']:,} of them checked against "
        f"the deliveries logged before their snapshot, the rest before their end).",
        "",
        "| queue | messages that had to be in the dumps | missing | ok |",
        "|---|---:|---:|---|",
    ]
    for queue, name in (("split", "split"), ("ring", "ring"), ("tx", TX_QUEUE)):
        items, missing = d["items"].get(queue, 0), d["missing"].get(queue, 0)
        lines.append(
            f"| {name} | {items:,} | {missing:,} | {'yes' if d['ok'] and not missing else 'NO'} |"
        )
    if d["examples"]:
        lines += ["", "Missing from their dump: " + ", ".join(d["examples"]) + "."]
    before, after = summary["ring_size_before"], summary["ring_size_after"]
    compacted = summary["compactions"]
    lines += [
        "",
        f"The ring's table: {before / 1024:,.0f} KiB before, {after / 1024:,.0f} KiB after "
        f"({after / before:.2f}x). Compactions by the workers: "
        + ", ".join(f"{n:,} of the {layout} queue" for layout, n in compacted.items())
        + " (the transactional consumer's keeper does not log its own).",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    (out / "chaos.md").write_text(text, encoding="utf-8")
    (out / "chaos.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    p.add_argument("--minutes", type=float, default=10.0, help="minutes of faults")
    p.add_argument("--out", type=Path, default=None, help="report folder")
    args = p.parse_args(argv)
    day = dt.date.today().isoformat()
    out = args.out or ROOT / "bench" / "results" / f"{day}-chaos"
    return run(args.minutes, out)


if __name__ == "__main__":
    threading.current_thread().name = "chaos"
    sys.exit(main(sys.argv[1:]))
