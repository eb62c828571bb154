"""What Alembic's autogenerate writes for unique items, through its real commands on real
PostgreSQL and SQLite: a queue that becomes unique gets ``add_column`` and ``create_index``
(its partial unique index), the upgrade gives a working unique queue, a second autogenerate
finds nothing, and the downgrade takes both away; a scope change drops the index and creates
it again with the new scope's WHERE clause, which Alembic alone would not see."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.orm import DeclarativeBase, Session

from dbqueue_sa import QueueMixin
from tests.sqlalchemy.test_migrations import autogenerate, migration_fixtures, ops_of
from tests.sqlalchemy.unique_jobs import UniqueJob, UniqueJobColumns

pytestmark = pytest.mark.sqlalchemy


class PlainBase(DeclarativeBase):
    """UniqueJob's table as it was before the queue declared unique items."""


class PlainJob(UniqueJobColumns, QueueMixin, PlainBase):
    __tablename__ = UniqueJob.__tablename__


class UnfinishedBase(DeclarativeBase):
    """UniqueJob alone (its own base holds the other unique queues too)."""


class UnfinishedJob(UniqueJobColumns, QueueMixin, UnfinishedBase):
    __tablename__ = UniqueJob.__tablename__
    __queue_options__ = UniqueJob.__queue_options__


class StoredBase(DeclarativeBase):
    """UniqueJob declared again with another scope."""


class StoredJob(UniqueJobColumns, QueueMixin, StoredBase):
    __tablename__ = UniqueJob.__tablename__
    __queue_options__ = {**UniqueJob.__queue_options__, "unique_scope": "stored"}


db, cfg = migration_fixtures(PlainBase.metadata, PlainBase.metadata)


def meta_columns(engine: sa.Engine) -> set[str]:
    return {c["name"] for c in sa.inspect(engine).get_columns(f"{UniqueJob.__tablename__}_meta")}


def test_a_queue_that_becomes_unique_gets_the_column_and_the_index(
    cfg: Config, db: sa.Engine
) -> None:
    autogenerate(cfg, "0001")
    command.upgrade(cfg, "head")
    assert "unique_key" not in meta_columns(db)

    cfg.attributes["metadata"] = UnfinishedBase.metadata
    upgrade, downgrade = autogenerate(cfg, "0002")
    assert ops_of(upgrade) == ["op.add_column", "op.create_index"]
    assert "sa.Column('unique_key', sa.Text(), nullable=True)" in upgrade
    name = UniqueJob.queue.spec.index_name("unique")
    assert f"op.create_index('{name}', 'sa_unique_job_meta', ['unique_key'], unique=True" in upgrade
    assert "unique_key IS NOT NULL AND state IN (0, 1, 6)" in upgrade
    assert ops_of(downgrade) == ["op.drop_index", "op.drop_column"]

    command.upgrade(cfg, "head")
    assert "unique_key" in meta_columns(db)
    (index,) = [i for i in sa.inspect(db).get_indexes("sa_unique_job_meta") if i["unique"]]
    assert (index["name"], index["column_names"]) == (name, ["unique_key"])
    with Session(db) as session:
        first = UniqueJob.queue.push(session, account="acme")
        again = UniqueJob.queue.push(session, account="acme")
        session.commit()
    assert again == first and again.duplicate
    command.check(cfg)  # a second autogenerate finds nothing to do

    command.downgrade(cfg, "0001")
    assert "unique_key" not in meta_columns(db)
    assert not any(i["unique"] for i in sa.inspect(db).get_indexes("sa_unique_job_meta"))


def unique_where(engine: sa.Engine) -> str:
    """The WHERE clause of the unique index, as the database reflects it."""
    (index,) = [i for i in sa.inspect(engine).get_indexes("sa_unique_job_meta") if i["unique"]]
    options = index.get("dialect_options", {})
    return str(options.get("postgresql_where", options.get("sqlite_where")))


def test_a_scope_change_drops_and_creates_the_index_again(cfg: Config, db: sa.Engine) -> None:
    """Alembic compares no WHERE clause: dbqueue's comparator sees the scope change."""
    cfg.attributes["metadata"] = UnfinishedBase.metadata
    autogenerate(cfg, "0001")
    command.upgrade(cfg, "head")
    before = unique_where(db)
    assert "state" in before

    cfg.attributes["metadata"] = StoredBase.metadata
    upgrade, downgrade = autogenerate(cfg, "0002")
    assert ops_of(upgrade) == ["op.drop_index", "op.create_index"]
    assert ops_of(downgrade) == ["op.drop_index", "op.create_index"]
    assert "postgresql_where=sa.text('unique_key IS NOT NULL')" in upgrade
    assert "state IN (0, 1, 6)" in downgrade
    command.upgrade(cfg, "head")
    assert "state" not in unique_where(db)
    command.check(cfg)  # a second autogenerate finds nothing to do

    command.downgrade(cfg, "0001")
    assert unique_where(db) == before
