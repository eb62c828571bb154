"""The ring queue under real concurrency on PostgreSQL: pusher and popper *processes*
(tests/reliability/ringworker.py) on one ring much smaller than the traffic, so it wraps many
times and pushes wait for free slots, while the test kills some of them with ``kill -9`` and
starts replacements, and a sweeper (``RingQueue.rescue``) runs beside them.

The workers keep exact books in tables next to the ring (see ringworker's docstring); the tests
check the protocol's invariants (docs/explanation/design.md, "The ring layout") against them:

* nothing pushed is lost, and nothing whose push rolled back is ever delivered;
* at-least-once: every message is acked exactly once, and every extra delivery is accounted
  for by a killed popper's last batch or by a lease that had expired (fencing);
* at-most-once and transactional pops deliver every message exactly once, even when the
  transactional poppers and the pushers are killed mid-transaction;
* while it runs, every slot's ``seq`` only grows and stays congruent to the slot modulo the
  capacity; at the end the ring is empty, the sequences agree with the slots, and one more
  full lap goes through (no slot was left unusable).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from dbqueue import DeliveryMode, QueueFull, RingQueue
from dbqueue.drivers import executor_for
from dbqueue.executor import Executor
from dbqueue.schema import create_ring_statements, drop_ring_statements
from tests.reliability.ringworker import (
    BOOKS,
    DIALECT,
    READY,
    Config,
    body_for,
    create_books,
    drop_books,
    record_sweep,
)

pytestmark = [
    pytest.mark.postgresql,
    pytest.mark.slow,
    # The two tests load both cores: never side by side (see the bloat test too).
    pytest.mark.xdist_group("ring_heavy"),
]

ROOT = Path(__file__).resolve().parents[2]
#: Longest a run may take before the test gives up (and shows the workers' logs).
PATIENCE = 300.0
CAPACITY = 4096
POP_BATCH = 50
PUSH_BATCH = 100  # pushers take batches of 1..PUSH_BATCH messages
#: The test process's sweeper runs this often; poppers run one too, every second.
SWEEP_EVERY = 0.2


@dataclass
class Proc:
    """One worker process started by the test."""

    role: str
    worker: int
    mode: str | None
    popen: subprocess.Popen[bytes]
    log: Path
    started: float = field(default_factory=time.monotonic)
    killed: bool = False
    args: tuple[str, ...] = ()


class Sweeper(threading.Thread):
    """``RingQueue.rescue`` every SWEEP_EVERY seconds on a connection of its own, recorded in
    the ``swept`` book as worker -1; any error it meets is kept and raised by :meth:`stop`."""

    def __init__(self, config: Config) -> None:
        super().__init__(name="ring-sweeper", daemon=True)
        self.config = config
        self.done = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.config.dsn, autocommit=True) as conn:
                ex = executor_for(DIALECT, conn)
                queue = RingQueue(self.config.spec(), DIALECT)
                while not self.done.wait(SWEEP_EVERY):
                    record_sweep(conn, self.config, -1, queue.rescue(ex))
        except BaseException as exc:  # pragma: no cover - reported by stop()
            self.error = exc

    def stop(self) -> None:
        self.done.set()
        self.join(30)
        assert not self.is_alive(), "the sweeper thread did not stop"
        if self.error is not None:
            raise AssertionError(f"the sweeper failed: {self.error!r}") from self.error


class Run:
    """A ring and its books in the test database, worker processes, a sweeper thread, and the
    test's own connection for checks. :meth:`close` leaves nothing behind."""

    def __init__(
        self, dsn: str, table: str, tmp: Path, seed: int, capacity: int = CAPACITY
    ) -> None:
        self.config = Config(dsn=dsn, table=table, capacity=capacity)
        self.capacity = capacity
        self.tmp = tmp
        self.rng = random.Random(seed)
        self.spec = self.config.spec()
        self.queue = RingQueue(self.spec, DIALECT)
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.ex = executor_for(DIALECT, self.conn)
        self.procs: list[Proc] = []
        self.env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.sweeper = Sweeper(self.config)
        self.last_seqs: dict[int, int] = {}
        self.samples = 0
        self.fullest = 0
        with self.conn.transaction():
            for statement in create_ring_statements(self.spec, DIALECT):
                self.conn.execute(statement)
            create_books(self.conn, self.config)

    # -- processes ------------------------------------------------------------------------------

    def _start(self, role: str, worker: int, mode: str | None, args: tuple[str, ...]) -> Proc:
        log = self.tmp / f"{role}-{worker}.log"
        cmd = [sys.executable, "-m", "tests.reliability.ringworker", role,
               "--config", self.config.to_json(), "--worker", str(worker), *args]  # fmt: skip
        with log.open("wb") as out:
            popen = subprocess.Popen(cmd, env=self.env, cwd=ROOT, stdout=out, stderr=out)
        proc = Proc(role, worker, mode, popen, log, args=args)
        self.procs.append(proc)
        return proc

    def start_pusher(self, first: int, count: int, *, in_transaction: bool) -> Proc:
        worker = len(self.procs)
        seed = str(self.rng.randrange(1 << 30))
        args: tuple[str, ...] = ("--first", str(first), "--count", str(count),
                                 "--batch", str(PUSH_BATCH), "--seed", seed)  # fmt: skip
        if not in_transaction:
            args += ("--autocommit",)
        return self._start("push", worker, None, args)

    def start_popper(self, mode: DeliveryMode) -> Proc:
        worker = len(self.procs)
        args = ("--mode", mode.value, "--batch", str(POP_BATCH), "--rescue-every", "1.0")
        return self._start("pop", worker, mode.value, args)

    def replace(self, proc: Proc) -> Proc:
        """kill -9 ``proc`` and start a replacement doing the same work."""
        proc.popen.send_signal(signal.SIGKILL)
        proc.popen.wait(30)
        proc.killed = True
        return self._start(proc.role, len(self.procs), proc.mode, proc.args)

    def live(self, role: str, mode: str | None = None) -> list[Proc]:
        return [
            p
            for p in self.procs
            if p.role == role and p.popen.poll() is None and (mode is None or p.mode == mode)
        ]

    def check_workers(self) -> None:
        """Fail at once if a worker died on its own (pushers exit 0 when they are done) or the
        sweeper thread failed."""
        if self.sweeper.error is not None:
            raise AssertionError(f"the sweeper failed: {self.sweeper.error!r}")
        for p in self.procs:
            rc = p.popen.poll()
            if rc is not None and not p.killed and not (p.role == "push" and rc == 0):
                raise AssertionError(
                    f"{p.role} worker {p.worker} exited {rc}; {self.diagnose()}; logs:\n"
                    f"{self.logs()}"
                )

    def stop_poppers(self) -> None:
        """SIGTERM the live poppers: each finishes its batch, keeps its books and exits 0. A
        replacement started a moment ago may still be importing, so each popper's ready line is
        awaited first (a SIGTERM before its handler exists would kill it with -15)."""
        poppers = self.live("pop")
        deadline = time.monotonic() + 60
        for p in poppers:
            while READY not in p.log.read_text(errors="replace") and p.popen.poll() is None:
                assert time.monotonic() < deadline, f"{p.log.name} never got ready"
                time.sleep(0.05)
        for p in poppers:
            p.popen.send_signal(signal.SIGTERM)
        codes = [p.popen.wait(60) for p in poppers]
        assert codes == [0] * len(poppers), self.logs()

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.log.name}:\n{p.log.read_text(errors='replace')[-3000:]}"
            for p in self.procs
            if p.log.exists() and p.log.stat().st_size
        )

    # -- checks ---------------------------------------------------------------------------------

    def scalar(self, query: str, *params: Any) -> int:
        row = self.conn.execute(sql.SQL(query).format(**self._names()), params).fetchone()
        assert row is not None
        return int(row[0] or 0)

    def rows(self, query: str) -> list[tuple[Any, ...]]:
        return self.conn.execute(sql.SQL(query).format(**self._names())).fetchall()

    def _names(self) -> dict[str, sql.Identifier]:
        return {
            "ring": sql.Identifier(self.spec.table),
            "failed": sql.Identifier(self.spec.failed_table),
            "push_seq": sql.Identifier(self.spec.push_seq),
            "pop_seq": sql.Identifier(self.spec.pop_seq),
            **{name: self.config.book(name) for name in BOOKS},
        }

    def next_number(self, sequence: str) -> int:
        """The next number ``push_seq`` or ``pop_seq`` hands out."""
        next_value = "CASE WHEN is_called THEN last_value + 1 ELSE last_value END"
        return self.scalar(f"SELECT {next_value} FROM {{{sequence}}}")

    def sample_slots(self) -> None:
        """Every slot's seq is congruent to the slot and never went back since the last look."""
        rows = self.rows("SELECT slot, seq, state FROM {ring}")
        self.fullest = max(self.fullest, sum(state != 0 for _, _, state in rows))
        for slot, seq, _ in rows:
            assert (seq - slot) % self.capacity == 0, f"slot {slot} holds number {seq}"
            before = self.last_seqs.get(slot)
            assert before is None or seq >= before, f"slot {slot} went back: {before} -> {seq}"
            self.last_seqs[slot] = seq
        self.samples += 1

    def wait_for(
        self, condition: Callable[[], bool], what: str, on_tick: Callable[[], None]
    ) -> None:
        deadline = time.monotonic() + PATIENCE
        next_sample = 0.0
        while not condition():
            self.check_workers()
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out waiting until {what}; {self.diagnose()}; logs:\n{self.logs()}"
                )
            on_tick()
            if time.monotonic() >= next_sample:
                self.sample_slots()
                next_sample = time.monotonic() + 1.0
            time.sleep(0.1)

    def diagnose(self) -> str:
        """The state of the ring, its books and the workers' sessions (for a timeout)."""
        counts = {name: self.scalar(f"SELECT count(*) FROM {{{name}}}") for name in BOOKS}
        slots = self.rows("SELECT slot, seq, state, pushed_at FROM {ring} ORDER BY slot")
        sessions = self.conn.execute(
            "SELECT pid, state, wait_event_type, wait_event, now() - xact_start, left(query, 60) "
            "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
        return (
            f"books {counts}, push_next {self.next_number('push_seq')}, "
            f"pop_next {self.next_number('pop_seq')}, slots {slots[:64]}, sessions {sessions}"
        )

    def assert_settled(self) -> dict[str, int]:
        """The ring is empty and its slots and sequences agree; returns the figures."""
        stats = self.queue.stats(self.ex)
        assert (stats.ready, stats.leased, stats.scheduled, stats.failed) == (0, 0, 0, 0), stats
        assert stats.capacity == self.capacity
        self.sample_slots()
        push_next, pop_next = self.next_number("push_seq"), self.next_number("pop_seq")
        seqs = [int(seq) for (seq,) in self.rows("SELECT seq FROM {ring}")]
        # Every slot holds a number handed out by the push sequence (or its initial one), at
        # most a lap behind the newest: no slot fell behind and none ran ahead.
        assert max(seqs) < push_next, (max(seqs), push_next)
        assert min(seqs) >= push_next - 2 * self.capacity, (min(seqs), push_next)
        # Idle poppers do not run ahead of the pushers (a bounded overshoot under races).
        assert pop_next <= push_next + 8 * POP_BATCH, (pop_next, push_next)
        swept = self.rows("SELECT sum(ready), sum(failed), sum(holes) FROM {swept}")[0]
        return {"push_next": push_next, "pop_next": pop_next, "min_seq": min(seqs),
                "max_seq": max(seqs), "swept_ready": int(swept[0] or 0),
                "swept_failed": int(swept[1] or 0), "swept_holes": int(swept[2] or 0),
                "fullest": self.fullest, "slot_samples": self.samples}  # fmt: skip

    def final_lap(self, first_key: int) -> None:
        """One more full lap through the ring (push CAPACITY messages, pop them) with only
        the sweeper beside it: every slot is still usable."""
        rng = random.Random(first_key)
        keys = range(first_key, first_key + self.capacity)
        step = min(512, self.capacity)
        got: list[int] = []
        deadline = time.monotonic() + 120
        for start in range(0, self.capacity, step):
            chunk = keys[start : start + step]
            self.queue.push_many(self.ex, [{"key": k, "body": body_for(k, rng)} for k in chunk])
            while len(got) < start + len(chunk):
                assert time.monotonic() < deadline, f"final lap: {len(got)} of {start + step}"
                batch = self.queue.pop_batch(self.ex, step, mode=DeliveryMode.AT_MOST_ONCE)
                got.extend(int(m.payload["key"]) for m in batch)
                if not batch:
                    time.sleep(0.05)
        assert sorted(got) == list(keys)

    def close(self) -> None:
        for p in self.procs:
            if p.popen.poll() is None:
                p.popen.kill()
                p.popen.wait(30)
        if self.sweeper.is_alive():
            self.sweeper.done.set()
            self.sweeper.join(30)
        for statement in drop_ring_statements(self.spec, DIALECT):
            self.conn.execute(statement)
        drop_books(self.conn, self.config)
        self.conn.close()


@pytest.fixture
def run(pg_dsn: str, table_name: str, tmp_path: Path) -> Iterator[Run]:
    """A ring of CAPACITY slots with its books; every process and table gone afterwards."""
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    r = Run(pg_dsn, table_name, tmp_path, seed)
    try:
        yield r
    finally:
        r.close()


def kill_as_it_goes(
    run: Run, victims: Callable[[], list[Proc]], kills: int, progress: str, total: int
) -> Callable[[], None]:
    """A tick function for :meth:`Run.wait_for`: ``kills`` times, spread evenly over the run's
    progress (the count ``progress`` queries, out of ``total``: the last kill at about 90%),
    kill -9 a random victim that has been running for half a second at least, and start its
    replacement. By progress, not by the clock: kills every 1-2 s left a run that the ring's
    speed-ups had brought down to 4 s with fewer kills than the tests assert."""
    marks = [total * (i + 1) // (kills + 1) * 9 // 10 for i in range(kills)]

    def tick() -> None:
        if not marks or run.scalar(progress) < marks[0]:
            return
        now = time.monotonic()
        ready = [p for p in victims() if now - p.started >= 0.5]
        if not ready:
            return
        run.replace(run.rng.choice(ready))
        marks.pop(0)

    return tick


def test_at_least_once_poppers_killed_lose_nothing(
    run: Run, record_property: Callable[[str, object], None]
) -> None:
    """100,000 messages, 4 pusher processes (push and push_many committing on their own) and 4
    at-least-once popper processes (pop_batch + ack), poppers killed with kill -9 up to eight
    times (at least five) and replaced, a sweeper in the test process and in every popper.
    Proves: every message is delivered and acked exactly once (fencing: a lease that was taken
    over cannot be acked); every delivery beyond the first is either the killed popper's batch
    in hand (at most POP_BATCH per kill) or a lease that had expired when its ack was refused;
    no message fails; the ring ends empty with its slots and sequences in agreement, after
    wrapping ~25 times under backpressure."""
    total, pushers, poppers, kills = 100_000, 4, 4, 8
    began = time.monotonic()
    start(run, total, pushers, [DeliveryMode.AT_LEAST_ONCE] * poppers, in_transaction=False)
    acked = "SELECT count(*) FROM {acked}"
    tick = kill_as_it_goes(run, lambda: run.live("pop"), kills, acked, total)
    run.wait_for(
        lambda: not run.live("push") and run.scalar("SELECT count(*) FROM {acked}") >= total,
        f"all {total} messages are acked",
        tick,
    )
    run.stop_poppers()
    elapsed = time.monotonic() - began

    killed = [p.worker for p in run.procs if p.killed]
    assert len(killed) >= 5, f"only {len(killed)} kills happened: the run was too short"
    assert run.scalar("SELECT count(*) FROM {pushed}") == total
    # Each key acked exactly once, and only keys that were pushed.
    assert run.rows("SELECT key FROM {acked} GROUP BY key HAVING count(*) > 1") == []
    assert run.scalar("SELECT count(DISTINCT key) FROM {acked}") == total
    assert (
        run.scalar("SELECT count(*) FROM {acked} WHERE key NOT IN (SELECT key FROM {pushed})") == 0
    )
    # A live popper acked or was refused every delivery it got...
    unresolved = run.rows(
        "SELECT s.worker, count(*) FROM {seen} AS s WHERE NOT EXISTS "
        "(SELECT FROM {acked} AS a WHERE a.worker = s.worker AND a.number = s.number) "
        "AND NOT EXISTS "
        "(SELECT FROM {refused} AS r WHERE r.worker = s.worker AND r.number = s.number) "
        "GROUP BY s.worker"
    )
    held_by_killed = {int(w): int(n) for w, n in unresolved}
    assert set(held_by_killed) <= set(killed), unresolved
    # ...and a killed one held at most its last batch.
    assert all(n <= POP_BATCH for n in held_by_killed.values()), unresolved
    # Refused acks only for leases that had run out (then the sweeper may take them back).
    refused = run.scalar("SELECT count(*) FROM {refused}")
    assert run.scalar("SELECT count(*) FROM {refused} WHERE at <= lease_until") == 0
    deliveries = run.scalar("SELECT count(*) FROM {seen}")
    duplicates = deliveries - run.scalar("SELECT count(DISTINCT key) FROM {seen}")
    assert duplicates == sum(held_by_killed.values()) + refused

    figures = finish(run, total)
    assert figures["swept_failed"] == 0
    report(record_property, "at-least-once, poppers killed", {
        "messages": total, "deliveries": deliveries, "duplicates": duplicates,
        "held_by_killed": sum(held_by_killed.values()), "refused_acks": refused,
        "kills": len(killed), "seconds": round(elapsed, 1), **figures,
    })  # fmt: skip


def test_transactional_and_at_most_once_deliver_exactly_once_despite_kills(
    run: Run, record_property: Callable[[str, object], None]
) -> None:
    """100,000 messages pushed in transactions (with their ``pushed`` rows) by 4 pushers
    killed with kill -9 now and then (their numbers become holes), popped by 2 transactional
    poppers (each pop commits with its ``seen`` rows) that are killed too (their claims strand)
    and 2 at-most-once poppers (never killed: what such a popper holds dies with it). Proves:
    every committed push is delivered exactly once, nothing from a rolled-back push is ever
    delivered, and the ring ends empty and consistent."""
    total, pushers = 100_000, 4
    began = time.monotonic()
    poppers = [DeliveryMode.TRANSACTIONAL] * 2 + [DeliveryMode.AT_MOST_ONCE] * 2
    start(run, total, pushers, poppers, in_transaction=True)
    kill_pushers = kill_as_it_goes(
        run, lambda: run.live("push"), 4, "SELECT count(*) FROM {pushed}", total
    )
    kill_poppers = kill_as_it_goes(
        run,
        lambda: run.live("pop", DeliveryMode.TRANSACTIONAL.value),
        6,
        "SELECT count(*) FROM {seen}",
        total,
    )

    def tick() -> None:
        kill_pushers()
        kill_poppers()

    run.wait_for(
        lambda: not run.live("push") and run.scalar("SELECT count(*) FROM {seen}") >= total,
        f"all {total} messages are delivered",
        tick,
    )
    run.stop_poppers()
    elapsed = time.monotonic() - began

    killed = [p.role for p in run.procs if p.killed]
    assert killed.count("push") >= 2 and killed.count("pop") >= 3, killed
    assert run.scalar("SELECT count(*) FROM {pushed}") == total
    assert run.rows("SELECT key FROM {pushed} GROUP BY key HAVING count(*) > 1") == []
    assert run.rows("SELECT key, count(*) FROM {seen} GROUP BY key HAVING count(*) > 1") == []
    assert run.scalar("SELECT count(*) FROM {seen}") == total
    assert (
        run.scalar("SELECT count(*) FROM {seen} WHERE key NOT IN (SELECT key FROM {pushed})") == 0
    )

    figures = finish(run, total)
    report(record_property, "transactional + at-most-once, pushers and poppers killed", {
        "messages": total, "killed_pushers": killed.count("push"),
        "killed_poppers": killed.count("pop"), "seconds": round(elapsed, 1), **figures,
    })  # fmt: skip


def start(
    run: Run, total: int, pushers: int, poppers: list[DeliveryMode], *, in_transaction: bool
) -> None:
    """The sweeper thread, pushers sharing keys 0 .. total - 1, and the poppers."""
    run.sweeper.start()
    share = total // pushers
    for i in range(pushers):
        run.start_pusher(i * share, share, in_transaction=in_transaction)
    for mode in poppers:
        run.start_popper(mode)


def finish(run: Run, total: int) -> dict[str, int]:
    """After the run: the ring is settled; one more full lap goes through it; still settled.
    Returns the figures of the run (see :meth:`Run.assert_settled`), with ``skipped``: the
    numbers the push sequence handed out that never held a message (holes: pushers killed
    or too slow, re-pushes that found the ring full)."""
    figures = run.assert_settled()
    figures["skipped"] = figures["push_next"] - total - figures["swept_ready"]
    run.final_lap(total)
    run.assert_settled()
    run.sweeper.stop()
    return figures


def report(
    record_property: Callable[[str, object], None], what: str, figures: dict[str, object]
) -> None:
    for key, value in figures.items():
        record_property(key, value)
    print(f"{what}: {figures}")


def test_a_push_in_a_transaction_never_waits_for_a_slot_nor_keeps_one(
    pg_dsn: str, table_name: str
) -> None:
    """A push inside a caller's transaction never waits for a slot's row lock, and holds none of
    a slot it did not write. A ring of 4 slots is full (0..3); popper H, in its transaction,
    has taken message 0 (it holds slot 0's row). Pusher B, in a transaction, takes number 4,
    whose slot is locked: it trades it for 5 at once (never waiting for H), whose slot holds
    message 1, not yet claimed: backpressure, then QueueFull. B was never seen waiting for a
    lock, and slot 0 stays lockable by anyone once H commits, B's transaction still open (a
    plain UPDATE that had waited for H and failed its recheck would hold the row until B
    ends)."""
    config = Config(dsn=pg_dsn, table=table_name, capacity=4, hole_timeout=3600.0,
                    stranded_after=3600.0, push_timeout=1.0)  # fmt: skip
    spec = config.spec()
    ring = sql.Identifier(table_name)
    conns: list[psycopg.Connection[Any]] = []

    def client() -> tuple[psycopg.Connection[Any], RingQueue, Executor]:
        conn = psycopg.connect(pg_dsn, autocommit=True)
        conns.append(conn)
        return conn, RingQueue(spec, DIALECT), executor_for(DIALECT, conn)

    admin, queue, ex = client()
    for statement in create_ring_statements(spec, DIALECT):
        admin.execute(statement)
    try:
        queue.push_many(ex, [{"key": k, "body": f"{k}:"} for k in range(4)])  # full: 0..3
        h_conn, h_queue, h_ex = client()
        h_conn.execute("BEGIN")
        assert [m.id for m in h_queue.pop_batch(h_ex, 1, mode="transactional")] == [0]
        b_conn, b_queue, b_ex = client()
        waits: list[bool] = []
        watching = threading.Event()

        def watch() -> None:
            pid = b_conn.info.backend_pid
            query = "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s"
            with psycopg.connect(pg_dsn, autocommit=True) as watcher:
                while not watching.is_set():
                    row = watcher.execute(query, (pid,)).fetchone()
                    waits.append(bool(row and row[0]))
                    time.sleep(0.005)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            b_conn.execute("BEGIN")
            with pytest.raises(QueueFull):
                b_queue.push(b_ex, {"key": 4, "body": "4:"})
        finally:
            watching.set()
            watcher.join(10)
        assert waits and not any(waits)
        assert admin.execute(sql.SQL("SELECT last_value FROM {}").format(
            sql.Identifier(spec.push_seq))).fetchone() == (5,)  # fmt: skip
        h_conn.execute("COMMIT")
        with admin.transaction():
            locked = sql.SQL("SELECT seq, state FROM {} WHERE slot = 0 FOR UPDATE NOWAIT")
            assert admin.execute(locked.format(ring)).fetchone() == (0, 0)  # B holds nothing
        b_conn.execute("ROLLBACK")
    finally:
        for conn in conns[1:]:
            conn.close()
        for statement in drop_ring_statements(spec, DIALECT):
            admin.execute(statement)
        admin.close()
