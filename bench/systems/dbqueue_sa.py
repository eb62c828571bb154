"""dbqueue's split and ring queues through the SQLAlchemy adapter (``Model.queue`` on a
Session), as an application using SQLAlchemy drives them: one Session, a commit per push or
per pop and per ack."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from bench.systems.base import PAYLOAD, System, Tally, serve_loop
from dbqueue_sa import QueueMixin
from dbqueue_sa.queue import SAQueue


class _Base(DeclarativeBase):
    """The bench's own MetaData: its tables only."""


class BenchSAJob(QueueMixin, _Base):
    """The bench queue: one text payload, as every system's."""

    __tablename__ = "bench_sa_job"
    payload: Mapped[str] = mapped_column(sa.Text())


def sqlalchemy_url(dsn: str) -> sa.URL:
    """A psycopg 3 SQLAlchemy URL for a libpq DSN (URL or key=value form)."""
    from psycopg.conninfo import conninfo_to_dict

    info = {k: str(v) for k, v in conninfo_to_dict(dsn).items()}
    query = {"host": info["host"]} if info.get("host", "").startswith("/") else {}
    return sa.URL.create(
        "postgresql+psycopg",
        username=info.get("user"),
        password=info.get("password"),
        host=None if query else info.get("host"),
        port=int(info["port"]) if info.get("port") else None,
        database=info.get("dbname"),
        query=query,
    )


class DBQueueSA(System):
    """``BenchSAJob.queue`` on a Session of an engine with one pooled connection."""

    name = "dbqueue-sa"
    label = "dbqueue split queue, SQLAlchemy Session"
    workloads = frozenset(
        {"push_single", "push_batch", "drain", "cycle", "pairs", "steady", "bloat", "longtx"}
    )
    tables = ("bench_sa_job", "bench_sa_job_meta", "bench_sa_job_head")

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.engine = sa.create_engine(sqlalchemy_url(dsn), pool_size=1)
        self.session = Session(self.engine)
        self.queue: SAQueue[BenchSAJob] = BenchSAJob.queue

    def install(self) -> None:
        _Base.metadata.create_all(self.engine)

    def reset(self) -> None:
        tables = ", ".join(f'"{table}"' for table in self.tables)
        with self.engine.begin() as conn:
            conn.exec_driver_sql(f"TRUNCATE {tables}")

    def close(self) -> None:
        self.session.close()
        self.engine.dispose()

    def push_single(self, n: int) -> None:
        push, session = self.queue.push, self.session
        for _ in range(n):
            push(session, payload=PAYLOAD)
            session.commit()

    def push_batch(self, n: int, batch: int) -> None:
        rows: list[dict[str, Any]] = [{"payload": PAYLOAD}] * batch
        for start in range(0, n, batch):
            self.queue.push_many(self.session, rows[: min(batch, n - start)], batch_size=batch)
            self.session.commit()

    def push_payload(self, payload: str) -> None:
        self.queue.push(self.session, payload=payload)
        self.session.commit()

    def depth(self) -> int:
        with Session(self.engine) as session:
            stats = self.queue.stats(session)
        return int(stats["ready"] + stats["scheduled"] + stats["leased"])

    def _pop(self, batch: int) -> list[BenchSAJob]:
        """Lease a batch and commit the leases (what a worker does before handling)."""
        items = self.queue.pop_batch(self.session, batch)
        self.session.commit()
        return items

    def _ack(self, items: list[BenchSAJob]) -> None:
        self.queue.ack(self.session, items)
        self.session.commit()

    def take(self, batch: int) -> int:
        items = self._pop(batch)
        if items:
            self._ack(items)
        return len(items)

    def drain(self, batch: int) -> Tally:
        tally = Tally()
        while taken := self.take(batch):
            tally.add(taken)
        return tally

    def serve(self, batch: int, seconds: float, handle: Callable[[str], None]) -> Tally:
        return serve_loop(lambda: self._pop(batch), self._ack, seconds, handle)
