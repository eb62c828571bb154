"""What Alembic's autogenerate writes for unique items, through its real commands on real
PostgreSQL and SQLite: a queue that becomes unique gets ``add_column`` and ``create_index``
(its partial unique index), the upgrade gives a working unique queue, a second autogenerate
finds nothing, and the downgrade takes both away."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from dbqueue_sa import QueueMixin
from tests.sqlalchemy.conftest import sync_url
from tests.sqlalchemy.test_migrations import autogenerate, environment, ops_of
from tests.sqlalchemy.unique_jobs import UniqueJob

pytestmark = pytest.mark.sqlalchemy


class PlainBase(DeclarativeBase):
    """UniqueJob's table as it was before the queue declared unique items."""


class PlainJob(QueueMixin, PlainBase):
    __tablename__ = UniqueJob.__tablename__

    account: Mapped[str] = mapped_column(sa.String(50))
    kind: Mapped[str] = mapped_column(sa.String(20), default="sync")
    note: Mapped[str] = mapped_column(sa.Text(), default="")


def unique_job_tables() -> sa.MetaData:
    """A metadata holding UniqueJob's tables only (copies), as its application declares them."""
    metadata = sa.MetaData()
    for table in (UniqueJob.__table__, UniqueJob.__queue_meta__):
        table.to_metadata(metadata)
    return metadata


def clear(engine: sa.Engine) -> None:
    with engine.begin() as connection:
        PlainBase.metadata.drop_all(connection)
        sa.Table("alembic_version", sa.MetaData()).drop(connection, checkfirst=True)


@pytest.fixture
def url(backend: str, request: pytest.FixtureRequest) -> str:
    """On PostgreSQL a database no other test leaves tables in: autogenerate compares the
    whole database with the metadata."""
    return sync_url(backend, request, "empty_pg_dsn")


@pytest.fixture
def db(url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(url)
    clear(engine)
    yield engine
    clear(engine)
    engine.dispose()


@pytest.fixture
def cfg(tmp_path: Path, url: str, db: sa.Engine) -> Config:
    config = environment(tmp_path, url)
    config.attributes["metadata"] = PlainBase.metadata
    return config


def meta_columns(engine: sa.Engine) -> set[str]:
    return {c["name"] for c in sa.inspect(engine).get_columns(f"{UniqueJob.__tablename__}_meta")}


def test_a_queue_that_becomes_unique_gets_the_column_and_the_index(
    cfg: Config, db: sa.Engine
) -> None:
    autogenerate(cfg, "0001")
    command.upgrade(cfg, "head")
    assert "unique_key" not in meta_columns(db)

    cfg.attributes["metadata"] = unique_job_tables()
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
