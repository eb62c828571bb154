"""What Alembic's autogenerate writes for consumer groups, through its real commands on real
PostgreSQL and SQLite: a new grouped queue gets its data table and each group's meta and head
tables, then ``tune_queue_tables`` with its groups; a group added later gets its two tables and
``tune_queue_group`` only; a group removed has its two tables dropped; each downgrade undoes
its upgrade."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.orm import DeclarativeBase, Session

from dbqueue_sa import QueueMixin
from tests.sqlalchemy.fanout_jobs import GROUPS, Order, OrderColumns
from tests.sqlalchemy.test_migrations import autogenerate, migration_fixtures, ops_of

pytestmark = pytest.mark.sqlalchemy

TABLE = Order.__tablename__


class TwoBase(DeclarativeBase):
    """Order alone, with its two groups."""


class TwoGroups(OrderColumns, QueueMixin, TwoBase):
    __tablename__ = TABLE
    __queue_options__ = Order.__queue_options__


class ThreeBase(DeclarativeBase):
    """Order with a third group, audit."""


class ThreeGroups(OrderColumns, QueueMixin, ThreeBase):
    __tablename__ = TABLE
    __queue_options__ = {**Order.__queue_options__, "groups": (*GROUPS, "audit")}


class OneBase(DeclarativeBase):
    """Order with the email group only."""


class OneGroup(OrderColumns, QueueMixin, OneBase):
    __tablename__ = TABLE
    __queue_options__ = {**Order.__queue_options__, "groups": ("email",)}


db, cfg = migration_fixtures(ThreeBase.metadata, TwoBase.metadata)


def tables(engine: sa.Engine) -> set[str]:
    return {t for t in sa.inspect(engine).get_table_names() if t.startswith(TABLE)}


def group_tables(*groups: str) -> set[str]:
    """The tables of these consumer groups of Order: each one's meta and head table."""
    return {f"{TABLE}_{kind}_{group}" for group in groups for kind in ("meta", "head")}


def test_groups_are_created_added_and_removed(cfg: Config, db: sa.Engine) -> None:
    upgrade, downgrade = autogenerate(cfg, "0001")
    for table in (TABLE, *group_tables(*GROUPS)):
        assert f"op.create_table('{table}'" in upgrade
        assert f"op.drop_table('{table}')" in downgrade
    assert f"'{TABLE}_meta'" not in upgrade and f"'{TABLE}_head'" not in upgrade
    assert f"op.tune_queue_tables('{TABLE}', groups=('email', 'search'))" in upgrade
    assert f"op.untune_queue_tables('{TABLE}', groups=('email', 'search'))" in downgrade
    command.upgrade(cfg, "head")
    assert tables(db) == {TABLE, *group_tables(*GROUPS)}
    with Session(db) as session:
        TwoGroups.queue.push(session, order_id=1)
        session.commit()
        assert [o.order_id for o in TwoGroups.queue.group("search").pop_batch(session)] == [1]
        session.commit()
    command.check(cfg)  # a second autogenerate finds nothing to do

    cfg.attributes["metadata"] = ThreeBase.metadata
    upgrade, downgrade = autogenerate(cfg, "0002")
    assert sorted(ops_of(upgrade)) == [
        "op.create_index", "op.create_index", "op.create_table", "op.create_table",
        "op.tune_queue_group",
    ]  # fmt: skip
    assert ops_of(upgrade)[-1] == "op.tune_queue_group"
    assert f"op.create_table('{TABLE}_meta_audit'" in upgrade
    assert f"op.create_table('{TABLE}_head_audit'" in upgrade
    assert f"op.tune_queue_group('{TABLE}', 'audit')" in upgrade
    assert ops_of(downgrade)[0] == "op.untune_queue_group"
    assert f"op.drop_table('{TABLE}_head_audit')" in downgrade
    assert ops_of(downgrade)[-1] == "op.drop_table"
    command.upgrade(cfg, "head")
    assert group_tables("audit") <= tables(db)
    with Session(db) as session:
        ThreeGroups.queue.push(session, order_id=2, priority=3)
        session.commit()
        assert ThreeGroups.queue.group("audit").count(session) == 1
        (popped,) = ThreeGroups.queue.group("audit").pop_batch(session)
        assert popped.order_id == 2
        session.commit()
    command.check(cfg)

    cfg.attributes["metadata"] = OneBase.metadata
    upgrade, downgrade = autogenerate(cfg, "0003")
    for table in group_tables("search", "audit"):
        assert f"op.drop_table('{table}')" in upgrade
    assert f"op.create_table('{TABLE}_meta_search'" in downgrade
    assert f"op.create_table('{TABLE}_head_search'" in downgrade
    command.upgrade(cfg, "head")
    assert tables(db) == {TABLE, *group_tables("email")}
    command.check(cfg)

    command.downgrade(cfg, "0001")
    assert tables(db) == {TABLE, *group_tables(*GROUPS)}
    command.downgrade(cfg, "base")
    assert tables(db) == set()
