"""The schedule table of periodic schedules (:mod:`dbqueue.scheduler`) for SQLAlchemy
applications: :func:`schedule_table` adds it to the application's ``MetaData``, so that
``create_all`` creates it and Alembic's autogenerate writes its ``op.create_table`` (column for
column what :func:`dbqueue.schema.schedule_statements` creates)."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa

from dbqueue.schedules import MAX_EXPRESSION, MAX_NAME, MAX_ZONE
from dbqueue.schema import SCHEDULE_TABLE
from dbqueue_sa.tables import dialect_types


def schedule_table(metadata: sa.MetaData) -> sa.Table:
    """The schedule table (``dbqueue_schedule``) in ``metadata``: added once, the same Table
    after. Declare it where the queue classes are, in every application whose handlers have
    ``@periodic`` schedules::

        from dbqueue_sa import schedule_table
        schedule_table(Base.metadata)
    """
    existing = metadata.tables.get(SCHEDULE_TABLE)
    if existing is not None:
        return existing
    table = sa.Table(
        SCHEDULE_TABLE,
        metadata,
        sa.Column("name", sa.String(MAX_NAME), primary_key=True),
        sa.Column("queue", sa.String(255), nullable=False),
        sa.Column("expression", sa.String(MAX_EXPRESSION), nullable=False),
        sa.Column("timezone", sa.String(MAX_ZONE), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_tick", sa.DateTime(timezone=True), nullable=True),
        sa.Column("next_tick", sa.DateTime(timezone=True), nullable=True),
    )
    dialect_types(table)
    return table


def last_ticks(connection: sa.Connection) -> dict[str, dt.datetime | None]:
    """The last tick pushed of each schedule in the database, by name."""
    table = schedule_table(sa.MetaData())
    rows = connection.execute(sa.select(table.c.name, table.c.last_tick))
    return {row.name: row.last_tick for row in rows}
