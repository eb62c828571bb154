"""A backup always holds the queue: ``pg_dump`` again and again while items are pushed, popped
and acked and the queues are compacted by every path there is, and each dump restored: every
item committed before the dump began, and not acked by then, is in it, as it was.

The outside tester's second finding on the compaction dbqueue had before VACUUM FULL: a
``pg_dump`` takes its snapshot first and locks the tables it dumps one by one after, so with
thousands of other tables in the database a compaction could TRUNCATE a queue between the
two, and the dump held it empty (24 of 30 dumps). Here, in a database of its own with
``FILLERS`` other tables created first (``pg_dump`` locks the queues' tables after theirs):

- two split queues hold ``DELAYED`` items each, pushed a day ahead, which stay throughout;
- four queues see traffic (push, pop, ack): the test app's split queue and ring through
  Django's ``Model.queue`` in a process of their own (:mod:`tests.reliability.actors`), the
  SQLAlchemy test models' split queue and ring through theirs, here; a
  :class:`~dbqueue.worker.Worker` consumes the Django queues too;
- every compacting path runs: ``compact()`` of the core (a loop over the four queues),
  Django's ``Model.queue.compact()`` and SQLAlchemy's ``Model.queue.compact(session)`` (loops),
  the worker's maintenance thread and the keeper of both processes (when due: their
  ``MIN_GROWTH`` lowered; the dumps' snapshots, and a REPEATABLE READ transaction held a while
  midway, make the tables grow);
- ``pg_dump -Fc`` runs ``DUMPS`` times; just before each, one snapshot records the items each
  queue holds; every other one is stalled after its snapshot by a lock on a filler table.

Then each dump's queue tables are restored into a fresh database (``FULL_RESTORES`` of them
whole, and popped through the core there). What a dump must hold: every item the snapshot
before it saw or whose push had returned before ``pg_dump`` started, but those a consumer had
taken by the time it ended (logged before their ack, so an ack that committed before the
dump's snapshot is among them); the delayed items each with its due time; a split queue's
data and meta rows in pairs; and no item whose push had returned before the snapshot before
it and that this snapshot did not see (acked before: a row "back" would be one that
compaction resurrected). Compactions that rewrote the tables while the dumps ran are counted
(asserted non-zero: else the test proves nothing), and those that ran between a dump's
transaction start and its lock on the queue's tables, the window TRUNCATE emptied (asserted
non-zero too).
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.orm import Session

from bench.env import libpq_environ
from bench.pgtools import pg_program
from dbqueue import QueueFull, QueueSpec, RingQueue, SplitQueue, get_dialect
from dbqueue.drivers.psycopg import PsycopgExecutor
from dbqueue.upkeep import compaction, keeper
from dbqueue.worker import Consumer, Worker
from dbqueue.worker_queue import ExecutorQueue
from tests.conformance.spec import JOB_FIELDS, JOB_OPTIONS, RING_OPTIONS
from tests.pg import database_url
from tests.reliability.actors import Compaction, trace_compactions
from tests.reliability.sites import Actors, own_database
from tests.sqlalchemy.models import Base
from tests.sqlalchemy.models import Job as SAJob
from tests.sqlalchemy.models import Tick as SATick

pytestmark = [
    pytest.mark.postgresql,
    pytest.mark.django,
    pytest.mark.sqlalchemy,
    pytest.mark.slow,
]

PG = get_dialect("postgresql")
#: Other tables, created before the queues': pg_dump locks the queues' tables after theirs.
FILLERS = 500
#: Items pushed a day ahead into each split queue, before the dumps; they stay throughout.
DELAYED = 300
#: Dumps taken (``DBQUEUE_BACKUP_DUMPS`` to change it), a second apart; ``FULL_RESTORES`` of
#: them (the first, the last, and evenly between) restored whole.
DUMPS = int(os.environ.get("DBQUEUE_BACKUP_DUMPS", "12"))
GAP = 1.0
FULL_RESTORES = 3
#: Seconds every other pg_dump waits, after its snapshot, for a lock another session holds on
#: a filler table (as a migration would), before it locks the queues' tables: the compactions
#: meanwhile run in the window TRUNCATE emptied (short without it: a few tens of ms).
STALL = 0.5
#: The growth that makes a compaction due for the worker and the keepers (the queues here are
#: small); and a REPEATABLE READ transaction of ``HOLD`` seconds after a third of the dumps.
MIN_GROWTH = 64 * 1024
HOLD = 4.0
#: Traffic numbers start here (the delayed items are 1..DELAYED).
FIRST = 1_000_000
#: The paths that compact (see tests.reliability.actors.THREAD_PATHS).
PATHS = ("core", "django", "sqlalchemy", "worker", "keeper")


@dataclass(frozen=True)
class Queue:
    """One of the queues under test: its table, its layout, and the payload column holding
    each item's unique number."""

    table: str
    layout: str
    number: str = "n"

    @property
    def tables(self) -> list[str]:
        if self.layout == "split":
            return [self.table, f"{self.table}_meta", f"{self.table}_head"]
        return [self.table, f"{self.table}_failed"]

    def live(self, conn: psycopg.Connection[Any]) -> dict[int, tuple[int, Any, str | None]]:
        """The items the queue holds, by number: (state, run_at, name); a ring's empty slots
        (state 0) hold none, whatever numbers they kept."""
        t, n = sql.Identifier(self.table), sql.Identifier(self.number)
        if self.layout == "split":
            query = sql.SQL(
                "SELECT d.{n}, m.state, m.run_at, d.name FROM {t} d JOIN {m} m USING (id)"
            ).format(n=n, t=t, m=sql.Identifier(f"{self.table}_meta"))
        else:
            query = sql.SQL(
                "SELECT {n}, state, NULL, NULL FROM {t} WHERE state IN (1, 2) "
                "UNION ALL SELECT {n}, state, run_at, NULL FROM {f}"
            ).format(n=n, t=t, f=sql.Identifier(f"{self.table}_failed"))
        return {int(r[0]): (int(r[1]), r[2], r[3]) for r in conn.execute(query)}

    def orphans(self, conn: psycopg.Connection[Any]) -> int:
        """A split queue's data rows without their meta row, and meta rows without their data
        row: none in any snapshot (a push writes both, an ack deletes both)."""
        if self.layout != "split":
            return 0
        query = sql.SQL(
            "SELECT count(*) FROM {t} d FULL JOIN {m} m USING (id) "
            "WHERE d.id IS NULL OR m.id IS NULL"
        ).format(t=sql.Identifier(self.table), m=sql.Identifier(f"{self.table}_meta"))
        row = conn.execute(query).fetchone()
        return int(row[0]) if row else 0


DJANGO_JOB = Queue("testapp_job", "split")
DJANGO_RING = Queue("testapp_ringjob", "ring")
SA_JOB = Queue(SAJob.queue.spec.table, "split")
SA_TICK = Queue(SATick.queue.spec.table, "ring", number="volume")
QUEUES = (DJANGO_JOB, DJANGO_RING, SA_JOB, SA_TICK)
#: The core's twins of the four queues (the Django models' are tests/conformance/spec.py's).
CORES: dict[str, SplitQueue | RingQueue] = {
    DJANGO_JOB.table: SplitQueue(QueueSpec(DJANGO_JOB.table, JOB_FIELDS, JOB_OPTIONS), PG),
    DJANGO_RING.table: RingQueue(QueueSpec(DJANGO_RING.table, JOB_FIELDS, RING_OPTIONS), PG),
    SA_JOB.table: SplitQueue(SAJob.queue.spec, PG),
    SA_TICK.table: RingQueue(SATick.queue.spec, PG),
}


@dataclass
class Events:
    """What the test's threads and the Django process did, by queue table and item number:
    when each push returned and when each item was first taken (before its ack), and every
    compaction of every path. Thread-safe."""

    pushes: dict[str, dict[int, float]] = field(default_factory=lambda: defaultdict(dict))
    pops: dict[str, dict[int, float]] = field(default_factory=lambda: defaultdict(dict))
    compactions: list[Compaction] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def pushed(self, table: str, numbers: list[int], at: float) -> None:
        with self.lock:
            self.pushes[table].update(dict.fromkeys(numbers, at))

    def popped(self, table: str, numbers: list[int], at: float) -> None:
        with self.lock:
            for n in numbers:
                self.pops[table].setdefault(n, at)

    def compacted(self, event: Compaction) -> None:
        with self.lock:
            self.compactions.append(event)

    def read_log(self, lines: list[str]) -> None:
        """Take in the Django process's log (tests.reliability.actors, role traffic)."""
        for line in lines:
            kind = line.split(" ", 1)[0]
            if kind == "compact":
                self.compacted(Compaction.parse(line))
            elif kind in ("push", "pop"):
                _, table, n, at = line.split(" ")
                record = self.pushed if kind == "push" else self.popped
                record(table, [int(n)], float(at))
            else:
                self.errors.append(f"django: {line}")


@dataclass
class Dump:
    """A dump: its file, when the snapshot before it was taken, when pg_dump started and
    ended, and what that snapshot saw of each queue."""

    index: int
    path: Path
    seen_at: float
    started: float
    ended: float
    seen: dict[str, dict[int, tuple[int, Any, str | None]]]


class Site:
    """The database under test, its traffic and its compactors, and the dumps taken."""

    def __init__(self, dsn: str, tmp: Path) -> None:
        self.dsn, self.tmp = dsn, tmp
        self.name = str(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"])
        self.events = Events()
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []
        self.dumps: list[Dump] = []
        self.pg_dump = pg_program("pg_dump", dsn)
        self.pg_restore = pg_program("pg_restore", dsn)
        url = database_url(dsn, self.name).replace("postgresql://", "postgresql+psycopg://", 1)
        self.engine = sa.create_engine(url)
        self.monitor = DumpMonitor(dsn, [t for q in QUEUES for t in q.tables])

    def connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn, autocommit=True)

    def executor(self) -> PsycopgExecutor:
        return PsycopgExecutor(self.connect())

    # -- set-up -------------------------------------------------------------------------------

    def create(self, actors: Actors) -> None:
        with self.connect() as conn:
            conn.execute(
                f"DO $$ BEGIN FOR i IN 1..{FILLERS} LOOP EXECUTE format("
                "'CREATE TABLE filler_%s (id int PRIMARY KEY, note text); "
                "INSERT INTO filler_%s VALUES (1, ''x'')', i, i); END LOOP; END $$"
            )
        actors.migrate()
        Base.metadata.create_all(self.engine)

    def push_delayed(self) -> dict[str, dict[int, tuple[int, Any, str | None]]]:
        """``DELAYED`` items a day ahead in each split queue: through the core (Django's
        table) and SQLAlchemy's front; what each queue then holds."""
        rows = [{"name": f"j{n}", "n": n} for n in range(1, DELAYED + 1)]
        with self.connect() as conn:
            CORES[DJANGO_JOB.table].push_many(
                PsycopgExecutor(conn), rows, delay=dt.timedelta(days=1)
            )
        with Session(self.engine) as session:
            SAJob.queue.push_many(session, rows, delay=dt.timedelta(days=1))
            session.commit()
        with self.connect() as conn:
            return {q.table: q.live(conn) for q in (DJANGO_JOB, SA_JOB)}

    # -- traffic and compaction ---------------------------------------------------------------

    def spawn(self, name: str, step: Callable[[], None]) -> None:
        """Run ``step`` over and over on a thread named ``name`` until the test stops; a
        failure is recorded (the test fails), and the thread goes on."""

        def loop() -> None:
            while not self.stopping.is_set():
                try:
                    step()
                except Exception as exc:
                    self.events.errors.append(f"{name}: {type(exc).__name__}: {exc}")
                    time.sleep(0.1)

        thread = threading.Thread(target=loop, name=name, daemon=True)
        self.threads.append(thread)
        thread.start()

    def sa_traffic(self, model: Any, queue: Queue, batch: int) -> Callable[[], None]:
        """Push ``batch`` items, pop up to ``batch`` and ack them, through SQLAlchemy's front."""
        numbers = iter(range(FIRST, 2**31))
        session = Session(self.engine)

        def payload(n: int) -> dict[str, Any]:
            if queue is SA_TICK:
                return {"symbol": "T", "price": Decimal(1), "volume": n}
            return {"name": f"j{n}", "n": n}

        def step() -> None:
            wanted = [next(numbers) for _ in range(batch)]
            try:
                model.queue.push_many(session, [payload(n) for n in wanted])
                session.commit()
            except QueueFull:  # the small ring, full for 50 ms: not stored
                session.rollback()
            else:
                self.events.pushed(queue.table, wanted, time.time())
            items = model.queue.pop_batch(session, batch)
            session.commit()
            if items:
                taken = [getattr(item, queue.number) for item in items]
                self.events.popped(queue.table, taken, time.time())
                model.queue.ack(session, items)
                session.commit()
            time.sleep(0.02)

        return step

    def start_traffic(self) -> Worker:
        self.spawn("traffic-sa-job", self.sa_traffic(SAJob, SA_JOB, 5))
        self.spawn("traffic-sa-tick", self.sa_traffic(SATick, SA_TICK, 4))
        core_ex = self.executor()

        def core() -> None:
            for queue in CORES.values():
                queue.compact(core_ex)
            time.sleep(0.05)

        sa_session = Session(self.engine)

        def front() -> None:
            SAJob.queue.compact(sa_session)
            SATick.queue.compact(sa_session)
            time.sleep(0.1)

        self.spawn("core", core)
        self.spawn("sqlalchemy", front)

        def handler(queue: Queue) -> Callable[[Any], None]:
            def handle(message: Any) -> None:
                self.events.popped(queue.table, [message.payload[queue.number]], time.time())

            return handle

        worker = Worker(
            [
                Consumer(ExecutorQueue(CORES[q.table], self.executor), handler(q), batch_size=10)
                for q in (DJANGO_JOB, DJANGO_RING)
            ]
        )
        thread = threading.Thread(
            target=worker.run, kwargs={"handle_signals": False}, name="worker-run", daemon=True
        )
        self.threads.append(thread)
        thread.start()
        return worker

    def hold(self, seconds: float) -> None:
        """A REPEATABLE READ transaction on a filler table, held ``seconds`` in the
        background: the horizon it holds makes the queues' tables grow."""

        def run() -> None:
            with self.connect() as conn:
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                conn.execute("SELECT count(*) FROM filler_1")
                time.sleep(seconds)
                conn.execute("COMMIT")

        thread = threading.Thread(target=run, name="holder", daemon=True)
        self.threads.append(thread)
        thread.start()

    # -- dumps --------------------------------------------------------------------------------

    def dump(self, index: int) -> Dump:
        """What each queue holds (one snapshot), then ``pg_dump -Fc`` of the database; every
        other one stalled ``STALL`` seconds between its snapshot and its locks on the queues'
        tables (see ``STALL``)."""
        with self.connect() as conn:
            seen_at = time.time()
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            seen = {q.table: q.live(conn) for q in QUEUES}
            conn.execute("COMMIT")
        path = self.tmp / f"dump-{index}.pgdump"
        with self.connect() as blocker:
            if index % 2 == 0:
                blocker.execute("BEGIN")
                blocker.execute(f"LOCK TABLE filler_{FILLERS // 2} IN ACCESS EXCLUSIVE MODE")
            started = time.time()
            proc = subprocess.Popen(
                [str(self.pg_dump), "-Fc", "-f", str(path)], env=libpq_environ(self.dsn),
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            if index % 2 == 0:
                time.sleep(STALL)
                blocker.execute("COMMIT")
            _, errors = proc.communicate(timeout=120)
        ended = time.time()
        assert proc.returncode == 0, errors
        return Dump(index, path, seen_at, started, ended, seen)

    @contextmanager
    def restore(self, dump: Dump, *, whole: bool) -> Iterator[psycopg.Connection[Any]]:
        """Restore ``dump`` into a fresh database (the queues' tables, or ``whole``); a
        connection to it, dropped after."""
        name = f"{self.name}_r{dump.index}"
        with psycopg.connect(self.dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        target = psycopg.conninfo.make_conninfo(self.dsn, dbname=name)
        try:
            only = [] if whole else [a for q in QUEUES for t in q.tables for a in ("-t", t)]
            done = subprocess.run(
                [str(self.pg_restore), "--exit-on-error", "-d", name, *only, str(dump.path)],
                env=libpq_environ(target), capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            with psycopg.connect(target, autocommit=True) as conn:
                yield conn
        finally:
            with psycopg.connect(self.dsn, autocommit=True) as admin:
                admin.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )

    def stop(self, worker: Worker | None) -> None:
        self.stopping.set()
        if worker is not None:
            worker.stop()
        for thread in self.threads:
            thread.join(60)
        self.engine.dispose()


class DumpMonitor:
    """Watches the database's ``pg_dump`` sessions every few milliseconds: when each one's
    transaction began, and when it was first seen holding its lock on each queue table."""

    def __init__(self, dsn: str, tables: list[str]) -> None:
        self.dsn, self.tables = dsn, tables
        self.started: dict[int, float] = {}  # backend pid -> xact_start
        self.locked: dict[int, dict[str, float]] = defaultdict(dict)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dump-monitor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        query = (
            "SELECT a.pid, extract(epoch FROM a.xact_start)::float8, "
            "array(SELECT c.relname::text FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
            "      WHERE l.pid = a.pid AND l.granted AND c.relname = ANY(%s)) "
            "FROM pg_stat_activity a "
            "WHERE a.application_name = 'pg_dump' AND a.datname = current_database()"
        )
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop.is_set():
                now = time.time()
                for pid, xact_start, locked in conn.execute(query, [self.tables]):
                    if xact_start is not None:
                        self.started.setdefault(pid, xact_start)
                    for table in locked:
                        self.locked[pid].setdefault(table, now)
                time.sleep(0.005)

    def window(self, dump: Dump, queue: Queue) -> tuple[float, float] | None:
        """From the transaction start of ``dump``'s pg_dump to when it was first seen holding
        its lock on ``queue``'s tables; None if the monitor missed it."""
        for pid, start in self.started.items():
            if dump.started <= start <= dump.ended:
                locks = [self.locked[pid][t] for t in queue.tables if t in self.locked[pid]]
                return (start, min(locks)) if locks else None
        return None


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Site, Actors]]:
    with own_database("dbqueue_backup") as dsn:
        actors = Actors(dsn, tmp_path, DBQUEUE_ACTOR_MIN_GROWTH=str(MIN_GROWTH))
        site = Site(dsn, tmp_path)
        monkeypatch.setattr(compaction, "MIN_GROWTH", MIN_GROWTH)
        undo = trace_compactions(site.events.compacted)
        keeper.enable()
        try:
            yield site, actors
        finally:
            keeper.disable()  # as the rest of the suite runs; its connections closed
            undo()
            actors.close()
            site.stopping.set()
            site.monitor.stop()
            site.engine.dispose()


def test_every_dump_holds_every_item_committed_before_it(site: tuple[Site, Actors]) -> None:
    s, actors = site
    s.create(actors)
    delayed = s.push_delayed()
    assert all(len(items) == DELAYED for items in delayed.values())
    actors.start("django", "traffic", str(FIRST))
    worker = s.start_traffic()
    s.monitor.start()
    began = time.time()
    try:
        for index in range(DUMPS):
            if index == DUMPS // 3:
                s.hold(HOLD)
            s.dumps.append(s.dump(index))
            time.sleep(GAP)
    finally:
        actors.stop("django")
        s.stop(worker)
        s.monitor.stop()
    finished = time.time()
    keeper.disable()  # the restored databases' pops below need none (they are dropped after)
    actors.wait("django")
    s.events.read_log(actors.lines("django"))
    events = s.events
    assert not events.errors, events.errors[:10]

    missing: list[str] = []
    back: list[str] = []
    damaged: list[str] = []
    checked = 0  # items that had to be in a dump, summed over the dumps
    whole = {round(i * (DUMPS - 1) / (FULL_RESTORES - 1)) for i in range(FULL_RESTORES)}
    for dump in s.dumps:
        with s.restore(dump, whole=dump.index in whole) as conn:
            for queue in QUEUES:
                found = queue.live(conn)
                pops, pushes = events.pops[queue.table], events.pushes[queue.table]
                seen = dump.seen[queue.table]
                # Seen by the snapshot before the dump, or pushed before it started; and not
                # taken (let alone acked) before it ended.
                committed = set(seen) | {n for n, at in pushes.items() if at < dump.started}
                required = {n for n in committed if pops.get(n, float("inf")) > dump.ended}
                checked += len(required)
                missing += [f"dump {dump.index} {queue.table} {n}" for n in required - set(found)]
                gone = {n for n, at in pushes.items() if at < dump.seen_at and n not in seen}
                back += [f"dump {dump.index} {queue.table} {n}" for n in gone & set(found)]
                for n, (state, run_at, _) in delayed.get(queue.table, {}).items():
                    if found.get(n, (None, None))[:2] != (state, run_at):
                        damaged.append(f"dump {dump.index} {queue.table} {n}: {found.get(n)}")
                damaged += [
                    f"dump {dump.index} {queue.table} {n}: name {name!r}"
                    for n, (_, _, name) in found.items()
                    if queue.layout == "split" and name != f"j{n}"
                ]
                if queue.orphans(conn):
                    damaged.append(f"dump {dump.index} {queue.table}: rows without their twin")
            if dump.index in whole:
                damaged += popped_whole(conn, dump)

    rewrote = [c for c in events.compactions if c.compacted]
    during = [c for c in rewrote if any(d.started <= c.start and c.end <= d.ended for d in s.dumps)]
    windows = {(d.index, q.table): s.monitor.window(d, q) for d in s.dumps for q in QUEUES}
    in_window = [
        c
        for c in rewrote
        for (index, table), w in windows.items()
        if w is not None and c.table == table and w[0] <= c.start and c.end <= w[1]
    ]
    spans = [w[1] - w[0] for w in windows.values() if w is not None]
    by_path = {p: sum(c.path == p for c in rewrote) for p in PATHS}
    tried = {p: sum(c.path == p for c in events.compactions) for p in PATHS}
    pushed, taken = sum(map(len, events.pushes.values())), sum(map(len, events.pops.values()))
    print(
        f"{DUMPS} dumps in {finished - began:.0f} s ({FULL_RESTORES} restored whole), "
        f"{checked:,} items that had to be in them; {pushed:,} pushed, {taken:,} taken; "
        f"compactions that rewrote the tables "
        f"by path {by_path} (tried {tried}), {len(during)} of them while a pg_dump ran, "
        f"{len(in_window)} between a dump's transaction start and its lock on the queue "
        f"({len(spans)} windows seen, median {statistics.median(spans or [0]) * 1000:.0f} ms); "
        f"missing "
        f"{len(missing)}, back {len(back)}, damaged {len(damaged)}"
    )
    assert not missing, missing[:20]
    assert not back, back[:20]
    assert not damaged, damaged[:20]
    assert all(by_path.values()), f"a path never compacted: {by_path}"
    assert during, "no compaction rewrote the tables while a pg_dump ran: the test proved nothing"
    assert in_window, "no compaction rewrote a queue between a dump's snapshot and its lock"


def popped_whole(conn: psycopg.Connection[Any], dump: Dump) -> list[str]:
    """In a database a dump was restored into whole, what the queues' pops take: a split
    queue's ready items (the heads restored with them hide none), its delayed ones waiting; a
    ring's ready items, and those whose lease has expired, once a rescue has pushed again the
    numbers its restored pop counter is past (pg_dump saves a sequence as it reads it, after its
    snapshot: those messages are stranded, as a popper's that died, until ``stranded_after``,
    0 here)."""
    wrong: list[str] = []
    ex = PsycopgExecutor(conn)
    now = _now(conn)
    for queue in QUEUES:
        core = CORES[queue.table]
        rows = queue.live(conn)
        if isinstance(core, RingQueue):
            options = replace(core.spec.options, stranded_after=dt.timedelta(0))
            core = RingQueue(replace(core.spec, options=options), PG)
            core.rescue(ex)
        ready = {n for n, (state, run_at, _) in rows.items() if state == 0 and run_at <= now}
        if isinstance(core, RingQueue):
            ready = {n for n, (state, _, _) in rows.items() if state == 1}
        leased = {n for n, (state, _, _) in rows.items() if state in (1, 2)} - ready
        taken: set[int] = set()
        while batch := core.pop_batch(ex, 500):
            taken.update(int(m.payload[queue.number]) for m in batch)
            core.ack(ex, batch)
        if not ready <= taken <= ready | leased:
            wrong.append(
                f"dump {dump.index} {queue.table}: popped {len(taken)} of {len(ready)} ready "
                f"(and {len(leased)} leased): {sorted(ready ^ taken)[:5]}"
            )
        if queue.layout == "split" and core.stats(ex).scheduled != DELAYED:
            wrong.append(f"dump {dump.index} {queue.table}: {core.stats(ex)}")
    return wrong


def _now(conn: psycopg.Connection[Any]) -> Any:
    row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]
