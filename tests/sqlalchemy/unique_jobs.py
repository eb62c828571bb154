"""Unique queues for the SQLAlchemy tests (issue 22 §2), the twins of testapp's ``UniqueJob``,
``QueuedUniqueJob`` and ``StoredUniqueJob``, on a base of their own: a module apart from
tests.sqlalchemy.models, so the tests that declare or create every queue of that module are
unchanged by them."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from dbqueue import Backoff
from dbqueue_sa import QueueMixin


class UniqueBase(DeclarativeBase):
    """The unique queues' own base and MetaData."""


class UniqueJobColumns:
    """UniqueJob's payload (testapp.UniqueJob's), shared with the migration tests' versions of
    it declared otherwise."""

    account: Mapped[str] = mapped_column(sa.String(50))
    kind: Mapped[str] = mapped_column(sa.String(20), default="sync")
    note: Mapped[str] = mapped_column(sa.Text(), default="")


class UniqueJob(UniqueJobColumns, QueueMixin, UniqueBase):
    """One unfinished item per account and kind; a push may give a key of its own instead."""

    __tablename__ = "sa_unique_job"
    __queue_options__ = {
        "unique": ("account", "kind"),
        "max_attempts": 2,
        "backoff": Backoff(base=dt.timedelta(0), cap=dt.timedelta(0)),
    }


class QueuedUniqueJob(QueueMixin, UniqueBase):
    """Items hold their key only while they wait (scope "queued")."""

    __tablename__ = "sa_queued_unique_job"
    __queue_options__ = {"unique": ("tag",), "unique_scope": "queued"}

    tag: Mapped[str] = mapped_column(sa.String(50))


class StoredUniqueJob(QueueMixin, UniqueBase):
    """Only pushes with a key of their own are deduplicated, for as long as an item is stored
    (scope "stored"), kept done items included."""

    __tablename__ = "sa_stored_unique_job"
    __queue_options__ = {"unique_scope": "stored", "keep_done": True}

    tag: Mapped[str] = mapped_column(sa.String(50))
