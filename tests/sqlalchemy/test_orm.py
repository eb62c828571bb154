"""What the ORM does on a queue class (dbqueue_sa.orm): session.add() is refused, naming the
push; session.delete() deletes the whole message; bulk DML on the queue's tables is refused
(but a split queue's payload update); a ring's slots are the queue's to write."""

from __future__ import annotations

from decimal import Decimal

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.orm import Session

from dbqueue.errors import InvalidArgument
from tests.sqlalchemy.models import Job, Tick

pytestmark = [pytest.mark.sqlalchemy, pytest.mark.anyio]


def rows(session: Session, table: str) -> int:
    return int(session.execute(sa.text(f'SELECT count(*) FROM "{table}"')).scalar_one())


def test_session_add_is_refused_and_names_the_push(engine: sa.Engine) -> None:
    with Session(engine) as session:
        session.add(Job(name="x"))
        with pytest.raises(InvalidArgument, match=r"Job.queue.push\(session"):
            session.flush()
        session.rollback()
        session.add(Tick(symbol="x", price=Decimal(1)))
        with pytest.raises(InvalidArgument, match=r"Tick.queue.push\(session"):
            session.commit()
        session.rollback()
        assert (rows(session, "sa_job"), rows(session, "sa_job_meta")) == (0, 0)
        assert Tick.queue.stats(session)["ready"] == 0


def test_session_delete_deletes_the_whole_message(engine: sa.Engine) -> None:
    with Session(engine) as session:
        a, b = Job.queue.push_many(session, [{"name": "a"}, {"name": "b"}])
        session.commit()
        session.delete(session.get(Job, a))
        session.commit()
        assert (rows(session, "sa_job"), rows(session, "sa_job_meta")) == (1, 1)
        (got,) = Job.queue.pop_batch(session, 5)
        assert (got.id, got.name) == (b, "b")
        session.delete(got)  # a leased item too
        session.commit()
        assert (rows(session, "sa_job"), rows(session, "sa_job_meta")) == (0, 0)


def test_a_changed_split_item_updates_its_payload(engine: sa.Engine) -> None:
    with Session(engine) as session:
        pk = Job.queue.push(session, name="before")
        session.commit()
        session.get(Job, pk).name = "after"  # type: ignore[union-attr]
        session.commit()
        session.execute(sa.update(Job).where(Job.id == pk).values(n=7))
        session.commit()
        session.expunge_all()
        (got,) = Job.queue.pop_batch(session, 1)
        assert (got.name, got.n) == ("after", 7)


def test_bulk_dml_on_the_queue_tables_is_refused(engine: sa.Engine) -> None:
    with Session(engine) as session:
        Job.queue.push(session, name="kept")
        Tick.queue.push(session, symbol="kept", price=Decimal(1))
        session.commit()
        for statement in (
            sa.delete(Job),
            sa.delete(Job.__table__),
            sa.delete(Job.__queue_meta__),
            sa.update(Job.__queue_meta__).values(state=0),
            sa.delete(Tick),
            sa.update(Tick).values(symbol="changed"),
        ):
            with pytest.raises(InvalidArgument, match=r"queue.delete\(session, ids\)"):
                session.execute(statement)
            session.rollback()
        assert (rows(session, "sa_job"), rows(session, "sa_job_meta")) == (1, 1)
        assert Tick.queue.stats(session)["ready"] == 1


def test_ring_slots_are_written_by_the_queue_and_deleted_as_messages(engine: sa.Engine) -> None:
    with Session(engine) as session:
        a, b = Tick.queue.push_many(session, [{"symbol": s, "price": 1} for s in "ab"])
        session.commit()
        slot = session.execute(sa.select(Tick).where(Tick.seq == a)).scalar_one()
        slot.symbol = "changed"
        with pytest.raises(InvalidArgument, match="written by its queue only"):
            session.commit()
        session.rollback()
        session.delete(session.execute(sa.select(Tick).where(Tick.seq == a)).scalar_one())
        session.commit()
        assert rows(session, "sa_tick") == 8  # the slot stays
        (got,) = Tick.queue.pop_batch(session, 5)
        assert (got.id, got.symbol) == (b, "b")


async def test_an_async_session_is_guarded_too(async_engine: AsyncEngine) -> None:
    async with AsyncSession(async_engine) as session:
        session.add(Job(name="x"))
        with pytest.raises(InvalidArgument, match=r"Job.queue.push\(session"):
            await session.flush()
