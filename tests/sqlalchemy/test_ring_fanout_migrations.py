"""What Alembic's autogenerate writes for a ring's consumer groups, through its real commands
on real PostgreSQL and SQLite: a new grouped ring gets its slot and side tables and each
group's state and side tables, then ``create_queue_ring`` and ``create_queue_ring_group`` per
group; a group added later gets its tables and ``create_queue_ring_group`` only, and receives
what is pushed from then on; a group removed is dropped with its counter; each downgrade undoes
its upgrade, and a second autogenerate finds nothing to do."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.util import CommandError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from dbqueue_sa import RingQueueMixin
from tests.sqlalchemy.ring_fanout_jobs import Tick
from tests.sqlalchemy.test_migrations import autogenerate, counters, migration_fixtures, ops_of

pytestmark = pytest.mark.sqlalchemy

TABLE = Tick.__tablename__
OPTIONS = {"capacity": 4, "when_full": "raise"}


class TickColumns:
    price: Mapped[int] = mapped_column(sa.Integer())


class OneBase(DeclarativeBase):
    """The ring with the trading group only."""


class OneGroup(TickColumns, RingQueueMixin, OneBase):
    __tablename__ = TABLE
    __queue_options__ = {**OPTIONS, "groups": ("trading",)}


class TwoBase(DeclarativeBase):
    """The ring with an audit group too."""


class TwoGroups(TickColumns, RingQueueMixin, TwoBase):
    __tablename__ = TABLE
    __queue_options__ = {**OPTIONS, "groups": ("trading", "audit")}


db, cfg = migration_fixtures(TwoBase.metadata, OneBase.metadata)


def tables(engine: sa.Engine) -> set[str]:
    return {t for t in sa.inspect(engine).get_table_names() if t.startswith(TABLE)}


def test_ring_groups_are_created_added_and_removed(cfg: Config, db: sa.Engine) -> None:
    upgrade, downgrade = autogenerate(cfg, "0001")
    for table in (TABLE, f"{TABLE}_failed", f"{TABLE}_ring_trading", f"{TABLE}_side_trading"):
        assert f"op.create_table('{TABLE}" in upgrade
        assert f"op.drop_table('{table}')" in downgrade
    last_table = upgrade.rindex("op.create_table(")
    assert upgrade.index(f"op.create_queue_ring('{TABLE}', capacity=4)") > last_table
    assert upgrade.index(
        f"op.create_queue_ring_group('{TABLE}', 'trading', capacity=4)"
    ) > upgrade.index("op.create_queue_ring(")
    assert downgrade.index("op.drop_queue_ring_group(") < downgrade.index("op.drop_table(")
    command.upgrade(cfg, "head")
    assert tables(db) >= {TABLE, f"{TABLE}_ring_trading", f"{TABLE}_side_trading"}
    assert f"{TABLE}_pop_trading" in counters(db)
    with Session(db) as session:
        old = OneGroup.queue.push(session, price=1)
        session.commit()
    command.check(cfg)  # a second autogenerate finds nothing to do

    cfg.attributes["metadata"] = TwoBase.metadata
    upgrade, downgrade = autogenerate(cfg, "0002")
    assert ops_of(upgrade) == [
        "op.create_table", "op.create_table", "op.create_index",
        "op.create_queue_ring_group",
    ]  # fmt: skip
    assert f"op.create_queue_ring_group('{TABLE}', 'audit', capacity=4)" in upgrade
    assert ops_of(downgrade)[0] == "op.drop_queue_ring_group"
    command.upgrade(cfg, "head")
    with Session(db) as session:
        new = TwoGroups.queue.push(session, price=2)
        session.commit()
        assert [t.id for t in TwoGroups.queue.group("audit").pop_batch(session, 5)] == [new]
        trading = TwoGroups.queue.group("trading").pop_batch(session, 5)
        assert [t.id for t in trading] == [old, new]
        session.commit()
    command.check(cfg)

    cfg.attributes["metadata"] = OneBase.metadata
    upgrade, downgrade = autogenerate(cfg, "0003")
    assert upgrade.index("op.drop_queue_ring_group(") < upgrade.index(
        f"op.drop_table('{TABLE}_ring_audit')"
    )
    assert f"op.create_queue_ring_group('{TABLE}', 'audit', capacity=4)" in downgrade
    command.upgrade(cfg, "head")
    assert f"{TABLE}_ring_audit" not in tables(db)
    assert f"{TABLE}_pop_audit" not in counters(db)
    command.check(cfg)

    command.downgrade(cfg, "0001")
    assert f"{TABLE}_ring_audit" not in tables(db) and f"{TABLE}_ring_trading" in tables(db)
    command.downgrade(cfg, "base")
    assert tables(db) == set() and not counters(db)


class WiderBase(DeclarativeBase):
    """The ring with one group and twice the slots."""


class Wider(TickColumns, RingQueueMixin, WiderBase):
    __tablename__ = TABLE
    __queue_options__ = {**OPTIONS, "capacity": 8, "groups": ("trading",)}


def test_a_capacity_change_of_a_ring_with_groups_is_refused(cfg: Config, db: sa.Engine) -> None:
    autogenerate(cfg, "0001")
    command.upgrade(cfg, "head")
    cfg.attributes["metadata"] = WiderBase.metadata
    upgrade, _ = autogenerate(cfg, "0002")
    assert "op.alter_queue_ring" in upgrade
    with pytest.raises(CommandError, match=r"consumer groups \(trading\)"):
        command.upgrade(cfg, "head")
    with db.connect() as conn:  # nothing changed
        assert conn.scalar(sa.text(f'SELECT count(*) FROM "{TABLE}"')) == 4
