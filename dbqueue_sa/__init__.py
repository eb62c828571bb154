"""dbqueue for SQLAlchemy 2.x: queues declared as mapped classes, run on your Session.

::

    from dbqueue_sa import QueueMixin, RingQueueMixin

    class OrderConfirmation(QueueMixin, Base):
        __tablename__ = "order_confirmation"
        order_id: Mapped[int]
        email: Mapped[str]

    with Session(engine) as session, session.begin():
        OrderConfirmation.queue.push(session, order_id=1, email="a@b.c")

See docs/tutorial/sqlalchemy.md.
"""

import sys as _sys

import sqlalchemy as _sa
from sqlalchemy.dialects import postgresql as _postgresql

from dbqueue_sa.handlers import handler
from dbqueue_sa.mixins import QueueMixin, RingQueueMixin, queue_classes
from dbqueue_sa.queue import SAQueue
from dbqueue_sa.ring_queue import RingSAQueue
from dbqueue_sa.schedules import schedule_table
from dbqueue_sa.worker import build_worker

#: A JSON payload column stored as ``jsonb`` on PostgreSQL (what Django's JSONField and the
#: core's DDL create) and as JSON text elsewhere: ``doc: Mapped[dict] = mapped_column(JSONB)``.
JSONB = _sa.JSON().with_variant(_postgresql.JSONB(), "postgresql")

__all__ = [
    "JSONB",
    "QueueMixin",
    "RingQueueMixin",
    "RingSAQueue",
    "SAQueue",
    "build_worker",
    "handler",
    "queue_classes",
    "schedule_table",
]


def _join_alembic() -> None:
    """Inside an Alembic run, register the queue operations and the autogenerate comparison
    (:mod:`dbqueue_sa.migrations`) even where env.py does not import them: env.py imports the
    models for its ``target_metadata``, so this package is imported once Alembic is. Outside
    Alembic (or before it is fully imported) nothing is loaded."""
    autogenerate = _sys.modules.get("alembic.autogenerate")
    if autogenerate is not None and hasattr(autogenerate, "comparators"):
        import dbqueue_sa.migrations  # noqa: F401


_join_alembic()
