"""What Alembic's autogenerate writes for a ring's consumer groups, through its real commands
on real PostgreSQL and SQLite: a new grouped ring gets its slot and side tables and each
group's state and side tables, then ``create_queue_ring`` and ``create_queue_ring_group`` per
group; a group added later gets its tables and ``create_queue_ring_group`` only, and receives
what is pushed from then on; a group removed is dropped with its counter; each downgrade undoes
its upgrade, and a second autogenerate finds nothing to do. A capacity change gives each
group its rows of the new slots, and is refused while a group holds a message."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from dbqueue.errors import RingNotEmpty
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


def rows(engine: sa.Engine, table: str) -> int:
    with engine.connect() as conn:
        return int(conn.scalar(sa.text(f'SELECT count(*) FROM "{table}"')) or 0)


def test_a_capacity_change_gives_each_group_its_rows_of_the_new_slots(
    cfg: Config, db: sa.Engine
) -> None:
    autogenerate(cfg, "0001")
    command.upgrade(cfg, "head")
    with Session(db) as session:
        old = OneGroup.queue.push(session, price=1)
        session.commit()
    cfg.attributes["metadata"] = WiderBase.metadata
    upgrade, downgrade = autogenerate(cfg, "0002")
    assert f"op.alter_queue_ring('{TABLE}', capacity=8, existing_capacity=4)" in upgrade
    assert f"op.alter_queue_ring('{TABLE}', capacity=4, existing_capacity=8)" in downgrade
    # The trading group has not taken the message: nothing may change.
    with pytest.raises(RingNotEmpty, match=r"consumer group 'trading' of ring queue 'sa_tick'"):
        command.upgrade(cfg, "head")
    assert (rows(db, TABLE), rows(db, f"{TABLE}_ring_trading")) == (4, 4)
    with Session(db) as session:
        trading = OneGroup.queue.group("trading")
        taken = trading.pop_batch(session, 5)
        assert [t.id for t in taken] == [old]
        trading.ack(session, taken)
        session.commit()
    command.upgrade(cfg, "head")
    assert (rows(db, TABLE), rows(db, f"{TABLE}_ring_trading")) == (8, 8)
    assert f"{TABLE}_pop_trading" in counters(db)
    with Session(db) as session:
        new = [Wider.queue.push(session, price=p) for p in range(6)]  # more than 4 slots
        session.commit()
        trading = Wider.queue.group("trading")
        taken = trading.pop_batch(session, 10)
        assert [t.id for t in taken] == new and new[0] > old  # numbered on
        trading.ack(session, taken)
        session.commit()
    command.check(cfg)
    command.downgrade(cfg, "0001")
    assert (rows(db, TABLE), rows(db, f"{TABLE}_ring_trading")) == (4, 4)
    with Session(db) as session:
        back = OneGroup.queue.push(session, price=3)
        session.commit()
        assert [t.id for t in OneGroup.queue.group("trading").pop_batch(session, 5)] == [back]
        session.commit()
