"""What the ORM does on a queue class: no way of writing a row that is not a whole message.

A queue class is a mapped class, so its users reach for ``session.add()``, ``session.delete()``
and ``session.execute(delete(...))``. Written as plain rows, those would make messages no
worker sees (a split queue's data row without its meta row) or break the queue (a ring's
slots). Listening on every ``Session`` (an ``AsyncSession`` runs one underneath):

* ``session.add(Job(...))`` is refused at flush with :class:`~dbqueue.errors.InvalidArgument`
  naming ``Job.queue.push(session, ...)``. (A push at flush would give the instance an identity
  the queue, not the session, controls: a ring's slot is reused by the next lap.)
* ``session.delete(job)`` deletes the whole message at flush, through ``Job.queue.delete``
  (meta and data rows; a ring's slot is emptied, not removed).
* A changed split item is flushed as an UPDATE of its payload (its delivery state lives in the
  meta table, which is not mapped): allowed. A changed ring slot is refused.
* ``session.execute(delete(Job))``, ``update(Job)`` and the same on the queue's tables are
  refused, but an ``update`` of a split queue's data table (its payload columns): use
  ``Job.queue.delete(session, ids)`` or ``Job.queue.purge(session)``.

SQL run outside the ORM (``connection.execute(text(...))``) is not seen here; a pop removes a
meta row whose data row such SQL deleted (see :mod:`dbqueue.split`).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.orm import ORMExecuteState, Session, UOWTransaction

from dbqueue.errors import InvalidArgument


def _queue_class(obj: object) -> type[Any] | None:
    cls = type(obj)
    return cls if "_dbqueue_queue" in cls.__dict__ else None


def _is_ring(cls: type[Any]) -> bool:
    return hasattr(cls, "__queue_failed__")


def _before_flush(session: Session, flush_context: UOWTransaction, instances: Any) -> None:
    for obj in list(session.new):
        cls = _queue_class(obj)
        if cls is not None:
            session.expunge(obj)
            raise InvalidArgument(
                f"{cls.__name__} rows are messages: push them with "
                f"{cls.__name__}.queue.push(session, ...) (or push_many); session.add() would "
                "write a row no worker sees. The instance was removed from the session"
            )
    for obj in list(session.dirty):
        cls = _queue_class(obj)
        if cls is not None and _is_ring(cls) and session.is_modified(obj):
            raise InvalidArgument(
                f"{cls.__name__}: a ring's slots are written by its queue only; push a new "
                f"message with {cls.__name__}.queue.push(session, ...), or delete this one"
            )
    for obj in list(session.deleted):
        cls = _queue_class(obj)
        if cls is not None:
            session.expunge(obj)  # its rows are the queue's to delete, not the flush's
            cls.queue.delete(session, [obj.id])


def _refuse_bulk(state: ORMExecuteState) -> None:
    if not (state.is_delete or state.is_update):
        return
    # An ORM statement's table is an annotated copy: tables are compared by name.
    table = getattr(state.statement, "table", None)
    name = getattr(table, "name", None)
    if not isinstance(table, sa.TableClause) or name is None:
        return
    cls = _owner(name, table.schema)
    if cls is None:
        return
    is_data = name == cls.__table__.name
    if state.is_update and is_data and not _is_ring(cls):
        return  # a split queue's payload columns: the data table is the user's to edit
    what = "delete" if state.is_delete else "update"
    raise InvalidArgument(
        f"{cls.__name__}: a bulk {what} of the queue's table {table.name!r} would leave "
        f"messages half written; use {cls.__name__}.queue.delete(session, ids) or "
        f"{cls.__name__}.queue.purge(session)"
    )


def _owner(name: str, schema: str | None) -> type[Any] | None:
    """The queue class one of whose tables (data, meta, a group's meta, slots or failed) is
    named ``name`` (queue tables live in the default schema)."""
    from dbqueue_sa.mixins import QUEUE_CLASSES, own_tables

    if schema is not None:
        return None
    for cls in QUEUE_CLASSES.values():
        if any(t.name == name for t in own_tables(cls)):
            return cls
    return None


def install() -> None:
    """Listen on every Session (once)."""
    if not event.contains(Session, "before_flush", _before_flush):
        event.listen(Session, "before_flush", _before_flush)
        event.listen(Session, "do_orm_execute", _refuse_bulk)
