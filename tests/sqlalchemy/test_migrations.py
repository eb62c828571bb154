"""Alembic, through its real commands on real PostgreSQL and SQLite: autogenerate against an
empty database writes the tables and the queue operations, the upgrade gives working queues
(slots, counters, storage parameters), a second autogenerate finds nothing, the downgrade
leaves nothing behind; a capacity change, a removed ring, tables created before the
operations existed and a split queue created before its head table existed are migrated too;
``--sql`` writes the operations' SQL."""

from __future__ import annotations

import datetime as dt
import io
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import alembic
import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

import dbqueue.front
from dbqueue.errors import InvalidSpec, QueueFull, RingNotEmpty
from dbqueue.schema import (
    SEGMENT_SLOTS,
    drop_ring_counter_statements,
    reset_statements,
    storage_parameters,
)
from dbqueue_sa import RingQueueMixin
from dbqueue_sa.migrations import DropQueueRingOp, empty_statements, table_spec
from dbqueue_sa.tables import core_dialect
from tests.sqlalchemy.conftest import sync_url
from tests.sqlalchemy.models import Base, Job, Tick

pytestmark = pytest.mark.sqlalchemy

#: A minimal env.py: the tests' models, dbqueue_sa.migrations' hooks, and server defaults
#: compared too (the strictest autogenerate). The target metadata can be swapped per test.
ENV_PY = """
import sqlalchemy as sa
from alembic import context

import dbqueue_sa.migrations as dbqueue_migrations
from tests.sqlalchemy.models import Base

config = context.config
options = {
    "target_metadata": config.attributes.get("metadata", Base.metadata),
    "include_object": dbqueue_migrations.include_object,
    "render_item": dbqueue_migrations.render_item,
    "compare_server_default": config.attributes.get("compare_server_default", True),
}
if context.is_offline_mode():
    context.configure(url=config.attributes["url"], literal_binds=True, **options)
    with context.begin_transaction():
        context.run_migrations()
else:
    engine = sa.create_engine(config.attributes["url"], poolclass=sa.pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, **options)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()
"""

#: env.py as a user writes it from Alembic's template: no import of dbqueue_sa.migrations, no
#: hooks (importing the models under Alembic loads the module all the same).
BARE_ENV_PY = (
    ENV_PY.replace("import dbqueue_sa.migrations as dbqueue_migrations\n", "")
    .replace('    "include_object": dbqueue_migrations.include_object,\n', "")
    .replace('    "render_item": dbqueue_migrations.render_item,\n', "")
)


class Resized(DeclarativeBase):
    """The tests' ring declared again with another capacity (a capacity change)."""


class BigTick(RingQueueMixin, Resized):
    __tablename__ = "sa_tick"
    __queue_options__ = {"capacity": 12, "push_timeout": dt.timedelta(milliseconds=50)}

    symbol: Mapped[str] = mapped_column(sa.String(12))
    price: Mapped[Decimal] = mapped_column(sa.Numeric(12, 4))
    volume: Mapped[int] = mapped_column(sa.Integer(), default=0)
    note: Mapped[str | None] = mapped_column(sa.Text())


class Segmented(DeclarativeBase):
    """The tests' ring declared again with more slots than compaction copies under one lock."""


class HugeTick(RingQueueMixin, Segmented):
    __tablename__ = "sa_tick"
    __queue_options__ = {"capacity": SEGMENT_SLOTS + 1}

    symbol: Mapped[str] = mapped_column(sa.String(12))
    price: Mapped[Decimal] = mapped_column(sa.Numeric(12, 4))
    volume: Mapped[int] = mapped_column(sa.Integer(), default=0)
    note: Mapped[str | None] = mapped_column(sa.Text())


def job_tables() -> sa.MetaData:
    """A metadata holding the tests' split queue only (copies of its tables)."""
    metadata = sa.MetaData()
    for table in (Job.__table__, Job.__queue_meta__, Job.__queue_head__):
        table.to_metadata(metadata)
    return metadata


def clear(engine: sa.Engine) -> None:
    """Drop every table and counter the tests make, and Alembic's version table."""
    dialect = core_dialect(engine.dialect.name)
    with engine.begin() as connection:
        Base.metadata.drop_all(connection)
        for statement in drop_ring_counter_statements(Tick.__queue_spec__, dialect):
            connection.exec_driver_sql(statement)
        sa.Table("alembic_version", sa.MetaData()).drop(connection, checkfirst=True)


@pytest.fixture(autouse=True)
def fresh_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ring is created again in every test: no pending pop claims from another one."""
    monkeypatch.setattr(dbqueue.front, "_CORES", {})


@pytest.fixture
def url(empty_url: str) -> str:
    """The backend's URL, of a database without other tests' tables (see empty_url)."""
    return empty_url


@pytest.fixture
def db(url: str) -> Iterator[sa.Engine]:
    """The worker's PostgreSQL database or a new SQLite file, without any queue table."""
    yield from cleared(url, clear)


def cleared(url: str, clear: Callable[[sa.Engine], None]) -> Iterator[sa.Engine]:
    """An engine over ``url``, whose tables ``clear`` drops before and after the test. A new
    connection for every look (NullPool): a pooled SQLite connection may answer PRAGMA
    index_list from the schema it read before Alembic's own connection changed it."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    clear(engine)
    yield engine
    clear(engine)
    engine.dispose()


@pytest.fixture
def cfg(tmp_path: Path, url: str, db: sa.Engine) -> Config:
    """An Alembic environment for the test's database, with no revision yet."""
    return environment(tmp_path, url)


def migration_fixtures(widest: sa.MetaData, target: sa.MetaData) -> tuple[Any, Any]:
    """The ``db`` and ``cfg`` fixtures of a module whose tests declare a queue in several
    ways: ``widest``, the declaration with every table, says what to drop before and after a
    test; ``target`` is the metadata autogenerate compares the database with at first."""

    def clear(engine: sa.Engine) -> None:
        with engine.begin() as connection:
            widest.drop_all(connection)
            sa.Table("alembic_version", sa.MetaData()).drop(connection, checkfirst=True)

    @pytest.fixture
    def db(empty_url: str) -> Iterator[sa.Engine]:
        yield from cleared(empty_url, clear)

    @pytest.fixture
    def cfg(tmp_path: Path, empty_url: str, db: sa.Engine) -> Config:
        config = environment(tmp_path, empty_url)
        config.attributes["metadata"] = target
        return config

    return db, cfg


def environment(tmp_path: Path, url: str, env_py: str = ENV_PY) -> Config:
    """An Alembic environment in a temporary directory, with no revision yet."""
    scripts = tmp_path / "migrations"
    (scripts / "versions").mkdir(parents=True)
    (scripts / "env.py").write_text(env_py)
    template = Path(alembic.__file__).parent / "templates" / "generic" / "script.py.mako"
    shutil.copy(template, scripts)
    config = Config()
    config.set_main_option("script_location", str(scripts))
    config.attributes["url"] = url
    config.attributes["scripts"] = scripts
    return config


def autogenerate(cfg: Config, rev: str) -> tuple[str, str]:
    """``alembic revision --autogenerate``: the new script's upgrade and downgrade bodies."""
    script = command.revision(cfg, message=rev, autogenerate=True, rev_id=rev)
    assert script is not None and not isinstance(script, list)
    text = Path(script.path).read_text()
    upgrade, downgrade = text.split("def downgrade")
    return upgrade.split("def upgrade")[1], downgrade


def migrated(cfg: Config) -> None:
    """Autogenerate the first revision and upgrade to it."""
    autogenerate(cfg, "0001")
    command.upgrade(cfg, "head")


def slots(engine: sa.Engine, table: str = "sa_tick") -> int:
    with engine.connect() as connection:
        return int(connection.scalar(sa.select(sa.func.count()).select_from(sa.table(table))))


def counters(engine: sa.Engine) -> set[str]:
    """The ring counters in the database: sequences, or tables on SQLite (a consumer group's
    is ``<ring>_pop_<group>``)."""
    inspector = sa.inspect(engine)
    names = set(inspector.get_table_names())
    if engine.dialect.supports_sequences:
        names |= set(inspector.get_sequence_names())
    return {n for n in names if n.endswith(("_push_seq", "_pop_seq")) or "_pop_" in n}


def reloptions(engine: sa.Engine, table: str) -> set[str]:
    with engine.connect() as connection:
        query = sa.text("SELECT reloptions FROM pg_class WHERE relname = :t")
        return set(connection.scalar(query, {"t": table}) or ())


def push_ticks(engine: sa.Engine, count: int, model: Any = Tick) -> list[int]:
    with Session(engine) as session, session.begin():
        return [model.queue.push(session, symbol="S", price=Decimal(1)) for _ in range(count)]


def drain(engine: sa.Engine, model: Any = Tick) -> int:
    """Pop every message at most once; return how many."""
    with Session(engine) as session:
        return len(model.queue.pop_batch(session, 100, mode="at_most_once"))


def ops_of(body: str) -> list[str]:
    """The ``op.`` calls of a script body, by name."""
    return [line.strip().split("(")[0] for line in body.splitlines() if "op." in line]


def test_autogenerate_writes_the_tables_then_the_queue_operations(cfg: Config) -> None:
    upgrade, downgrade = autogenerate(cfg, "0001")
    for table in ("sa_job", "sa_job_meta", "sa_job_head", "sa_tick", "sa_tick_failed"):
        assert f"op.create_table('{table}'" in upgrade
        assert f"op.drop_table('{table}')" in downgrade
    last_table = upgrade.rindex("op.create_table(")
    assert upgrade.index("op.tune_queue_tables('sa_job')") > last_table
    assert upgrade.index("op.create_queue_ring('sa_tick', capacity=8)") > last_table
    # The downgrade undoes them first, while the tables are still there.
    first_drop = downgrade.index("op.drop_table(")
    assert downgrade.index("op.drop_queue_ring('sa_tick', capacity=8)") < first_drop
    assert downgrade.index("op.untune_queue_tables('sa_job')") < first_drop
    # Database time defaults are written for every database, not in one's SQL.
    assert "server_default=dbqueue_sa.tables.now()" in upgrade
    assert "statement_timestamp" not in upgrade and "STRFTIME" not in upgrade


def test_the_upgrade_gives_working_queues(cfg: Config, db: sa.Engine, backend: str) -> None:
    migrated(cfg)
    assert slots(db) == 8
    assert counters(db) == {"sa_tick_push_seq", "sa_tick_pop_seq"}
    if backend == "postgresql":
        assert {"fillfactor=80", "autovacuum_vacuum_cost_delay=0"} <= reloptions(db, "sa_job_meta")
        assert "autovacuum_vacuum_insert_scale_factor=0.05" in reloptions(db, "sa_job")
        assert {"fillfactor=10", "autovacuum_vacuum_threshold=1000"} <= reloptions(db, "sa_tick")
    with Session(db) as session, session.begin():
        job_id = Job.queue.push(session, name="a", n=1)
    with Session(db) as session, session.begin():
        (job,) = Job.queue.pop_batch(session, 10)
        assert (job.id, job.name) == (job_id, "a")
        assert Job.queue.ack(session, job) == [job_id]
    assert push_ticks(db, 8) == list(range(8))
    with pytest.raises(QueueFull):
        push_ticks(db, 1)
    assert drain(db) == 8
    with Session(db) as session:
        Tick.queue.check(session)


def test_autogenerate_after_the_upgrade_finds_nothing(cfg: Config) -> None:
    migrated(cfg)
    command.check(cfg)  # raises AutogenerateDiffsDetected, listing them


def test_an_alembic_run_registers_the_queue_operations() -> None:
    """As under the alembic command: Alembic imported first, then env.py imports the models
    (so dbqueue_sa) without importing dbqueue_sa.migrations: the operations exist."""
    code = (
        "import sys; from alembic import command; from alembic.operations import Operations; "
        "import dbqueue_sa; "
        "print('dbqueue_sa.migrations' in sys.modules, hasattr(Operations, 'create_queue_ring'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"], out.stderr
    # Without Alembic, importing the package loads none of it.
    code = "import sys, dbqueue_sa; print('alembic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"], out.stderr


def test_a_script_autogenerated_without_the_env_hooks_works(
    tmp_path: Path, url: str, db: sa.Engine
) -> None:
    """env.py without dbqueue's hooks: the script imports the module of dbqueue's column types
    (Alembic writes them under its name: NameError without it), creates the ring's slots and
    counters, and the next autogenerate finds nothing, the SQLite counters included."""
    cfg = environment(tmp_path, url, BARE_ENV_PY)
    upgrade, _ = autogenerate(cfg, "0001")
    script = next((tmp_path / "migrations" / "versions").glob("0001_*.py")).read_text()
    assert "import dbqueue_sa.tables" in script
    assert "op.create_queue_ring('sa_tick', capacity=8)" in upgrade
    command.upgrade(cfg, "head")
    assert slots(db) == 8
    assert counters(db) == {"sa_tick_push_seq", "sa_tick_pop_seq"}
    assert push_ticks(db, 3) == [0, 1, 2]
    assert drain(db) == 3
    command.check(cfg)


def test_the_downgrade_leaves_nothing_behind(cfg: Config, db: sa.Engine) -> None:
    migrated(cfg)
    push_ticks(db, 3)
    command.downgrade(cfg, "base")
    assert set(sa.inspect(db).get_table_names()) == {"alembic_version"}
    assert counters(db) == set()
    if db.dialect.supports_sequences:
        assert sa.inspect(db).get_sequence_names() == []


def test_a_capacity_change_waits_for_an_empty_ring_and_numbers_on(
    cfg: Config, db: sa.Engine
) -> None:
    migrated(cfg)
    push_ticks(db, 3)
    cfg.attributes["metadata"] = [Resized.metadata, job_tables()]
    upgrade, downgrade = autogenerate(cfg, "0002")
    assert ops_of(upgrade) == ["op.alter_queue_ring"]
    assert "op.alter_queue_ring('sa_tick', capacity=12, existing_capacity=8)" in upgrade
    assert "op.alter_queue_ring('sa_tick', capacity=8, existing_capacity=12)" in downgrade

    with pytest.raises(RingNotEmpty, match=r"'sa_tick' holds 3 message\(s\) \(3 ready") as info:
        command.upgrade(cfg, "head")
    assert "(dbqueue worker ... --burst, run from the code that still declares" in str(info.value)
    assert str(info.value).endswith("'Change a ring's capacity')")
    assert slots(db) == 8

    assert drain(db) == 3
    command.upgrade(cfg, "head")
    assert slots(db) == 12
    # No new message takes a number the old ring handed out.
    assert push_ticks(db, 12, BigTick) == list(range(3, 15))
    with pytest.raises(QueueFull):
        push_ticks(db, 1, BigTick)
    command.check(cfg)

    assert drain(db, BigTick) == 12
    command.downgrade(cfg, "0001")
    assert slots(db) == 8
    # 15 or above: on PostgreSQL the push refused as full used up 15 (sequences do not roll
    # back), on SQLite the counter tables rolled back with it.
    (number,) = push_ticks(db, 1)
    assert number >= 15


@pytest.mark.parametrize("backend", [pytest.param("postgresql", marks=pytest.mark.postgresql)])
def test_a_ring_of_many_slots_keeps_them_in_segments(cfg: Config, db: sa.Engine) -> None:
    """More slots than compaction copies under one lock: the slot table is split into
    segments, each with the ring's storage parameters, which autogenerate leaves alone; the
    downgrade makes it one table again."""
    migrated(cfg)
    cfg.attributes["metadata"] = [Segmented.metadata, job_tables()]
    upgrade, _ = autogenerate(cfg, "0002")
    assert ops_of(upgrade) == ["op.alter_queue_ring"]
    command.upgrade(cfg, "head")
    command.check(cfg)
    assert slots(db) == SEGMENT_SLOTS + 1
    assert sorted(sa.inspect(db).get_table_names()) == [
        "alembic_version", "sa_job", "sa_job_head", "sa_job_meta", "sa_tick", "sa_tick_failed",
        "sa_tick_s0", "sa_tick_s1",
    ]  # fmt: skip
    for segment in ("sa_tick_s0", "sa_tick_s1"):
        assert "fillfactor=10" in reloptions(db, segment)
    assert push_ticks(db, 3, HugeTick) == [0, 1, 2]
    assert drain(db, HugeTick) == 3

    command.downgrade(cfg, "0001")
    assert "sa_tick_s0" not in sa.inspect(db).get_table_names()
    assert slots(db) == 8
    assert "fillfactor=10" in reloptions(db, "sa_tick")


def test_removing_a_ring_drops_its_counters_and_the_downgrade_restores_it(
    cfg: Config, db: sa.Engine
) -> None:
    migrated(cfg)
    cfg.attributes["metadata"] = job_tables()
    upgrade, downgrade = autogenerate(cfg, "0002")
    assert sorted(ops_of(upgrade)) == [
        "op.drop_index", "op.drop_queue_ring", "op.drop_table", "op.drop_table",
    ]  # fmt: skip
    assert "op.drop_queue_ring('sa_tick', capacity=8)\n    op.drop_table('sa_tick')" in upgrade
    assert downgrade.index("op.create_table('sa_tick'") < downgrade.index(
        "op.create_queue_ring('sa_tick', capacity=8)"
    )

    command.upgrade(cfg, "head")
    assert not sa.inspect(db).has_table("sa_tick")
    assert counters(db) == set()

    command.downgrade(cfg, "0001")
    assert slots(db) == 8
    assert push_ticks(db, 8) == list(range(8))
    # The database is as the first revision made it: what Base.metadata declares.
    del cfg.attributes["metadata"]
    Path(cfg.attributes["scripts"], "versions", "0002_0002.py").unlink()
    command.check(cfg)


def test_existing_queue_tables_get_their_slots_and_storage_parameters(
    cfg: Config, db: sa.Engine, backend: str
) -> None:
    """Tables made before the operations existed: a ring without slots or counters, a split
    queue without storage parameters."""
    Base.metadata.create_all(db)
    dialect = core_dialect(db.dialect.name)
    ring = table_spec("sa_tick")
    with db.begin() as connection:
        for statement in [
            *empty_statements(ring, dialect),
            *drop_ring_counter_statements(ring, dialect),
            *reset_statements(storage_parameters(Job.__queue_spec__, dialect), dialect),
        ]:
            connection.exec_driver_sql(statement)

    upgrade, _ = autogenerate(cfg, "0001")
    expected = ["op.create_queue_ring"] + ["op.tune_queue_tables"] * (backend == "postgresql")
    assert sorted(ops_of(upgrade)) == expected
    command.upgrade(cfg, "head")
    assert slots(db) == 8
    assert push_ticks(db, 8) == list(range(8))
    command.check(cfg)

    command.downgrade(cfg, "base")
    assert slots(db) == 0
    assert counters(db) == set()
    assert sa.inspect(db).has_table("sa_job_meta")


@pytest.mark.parametrize("env_py", [ENV_PY, BARE_ENV_PY], ids=["hooks", "bare"])
def test_a_split_queue_without_its_head_table_gets_it(
    tmp_path: Path, url: str, db: sa.Engine, backend: str, env_py: str
) -> None:
    """A project upgrading from a dbqueue without head tables: autogenerate writes the head
    table's ``create_table`` alone (the queue's other tables are as they were), the script
    runs without dbqueue's env.py hooks too (it imports the module of the head table's
    SQLite timestamp type), the queue works on it, and the next autogenerate finds nothing."""
    cfg = environment(tmp_path, url, env_py)
    Base.metadata.create_all(db)
    Job.__queue_head__.drop(db)
    upgrade, downgrade = autogenerate(cfg, "0001")
    assert ops_of(upgrade) == ["op.create_table"]
    assert "op.create_table('sa_job_head'" in upgrade
    assert (
        "sa.Column('priority', sa.SmallInteger(), autoincrement=False, nullable=False)" in upgrade
    )
    assert "sa.PrimaryKeyConstraint('priority')" in upgrade
    assert ops_of(downgrade) == ["op.drop_table"] and "'sa_job_head'" in downgrade
    script = next((tmp_path / "migrations" / "versions").glob("0001_*.py")).read_text()
    assert "import dbqueue_sa.tables" in script
    command.upgrade(cfg, "head")
    assert sa.inspect(db).has_table("sa_job_head")
    with Session(db) as session, session.begin():
        low = Job.queue.push(session, name="low", n=1, priority=-1)
        high = Job.queue.push(session, name="high", n=2, priority=5)
    with Session(db) as session, session.begin():
        assert [j.id for j in Job.queue.pop_batch(session, 10)] == [high, low]
    command.check(cfg)
    command.downgrade(cfg, "base")
    assert not sa.inspect(db).has_table("sa_job_head")
    assert sa.inspect(db).has_table("sa_job_meta")


@pytest.mark.postgresql
@pytest.mark.sqlite
@pytest.mark.parametrize(
    ("written_on", "run_on"), [("sqlite", "postgresql"), ("postgresql", "sqlite")]
)
def test_a_script_written_on_one_database_runs_on_the_other(
    tmp_path: Path, request: pytest.FixtureRequest, written_on: str, run_on: str
) -> None:
    """With render_item, the script holds no one database's SQL or types."""
    urls = {b: sync_url(b, request, "empty_pg_dsn") for b in (written_on, run_on)}
    engines = {backend: sa.create_engine(url) for backend, url in urls.items()}
    target = engines[run_on]
    try:
        for engine in engines.values():
            clear(engine)
        cfg = environment(tmp_path, urls[written_on])
        autogenerate(cfg, "0001")
        cfg.attributes["url"] = urls[run_on]
        command.upgrade(cfg, "head")
        command.check(cfg)
        assert slots(target) == 8
        command.downgrade(cfg, "base")
        assert set(sa.inspect(target).get_table_names()) == {"alembic_version"}
    finally:
        for engine in engines.values():
            clear(engine)
            engine.dispose()


def test_upgrade_sql_writes_the_operations_statements(cfg: Config, backend: str) -> None:
    autogenerate(cfg, "0001")
    cfg.output_buffer = out = io.StringIO()
    command.upgrade(cfg, "head", sql=True)
    sql = out.getvalue()
    assert 'INSERT INTO "sa_tick" (slot, seq' in sql
    if backend == "postgresql":
        assert 'CREATE SEQUENCE "sa_tick_push_seq" AS bigint MINVALUE 0 START 0;' in sql
        assert 'ALTER TABLE "sa_job_meta" SET (fillfactor = 80' in sql
    else:
        assert 'CREATE TABLE "sa_tick_push_seq" (value integer NOT NULL);' in sql


def test_operations_refuse_what_they_could_not_undo() -> None:
    with pytest.raises(alembic.util.CommandError, match=r"capacity=<slots>"):
        DropQueueRingOp("sa_tick").reverse()
    with pytest.raises(InvalidSpec, match="not a valid identifier"):
        DropQueueRingOp("Tick; DROP TABLE x")
    with pytest.raises(InvalidSpec, match="capacity"):
        DropQueueRingOp("sa_tick", capacity=0)
