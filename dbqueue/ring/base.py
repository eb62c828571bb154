"""What the parts of a ring queue share: its capacity, the process's pending claims, how its
statements' rows are read, and the capabilities of the database it runs on."""

from __future__ import annotations

import time
from typing import Any

from dbqueue.dialects.base import Dialect
from dbqueue.errors import InvalidSpec, QueueTableMissing, RingCapacityMismatch
from dbqueue.executor import Executor, Row
from dbqueue.layout import Layout
from dbqueue.message import Message
from dbqueue.ring.claims import Claims
from dbqueue.ring.states import PopRow
from dbqueue.spec import QueueSpec

#: Where a pop row's payload starts: after the columns of :class:`PopRow`.
PAYLOAD_AT = len(PopRow._fields)
#: The column of a pop row that says whether it took a message.
TAKEN_AT = PopRow._fields.index("taken")


class RingBase(Layout):
    """The state and helpers every part of :class:`~dbqueue.ring.RingQueue` uses.

    Thread-safe: it holds no connection, only the process's pending pop claims.
    """

    layout = "ring"

    def __init__(self, spec: QueueSpec, dialect: Dialect) -> None:
        if spec.options.capacity is None:
            raise InvalidSpec(
                f"queue {spec.table!r}: a ring queue needs QueueOptions(capacity=...), the "
                f"number of slots its table holds"
            )
        self.capacity: int = spec.options.capacity
        #: Numbers come from sequences outside transactions (PostgreSQL): pushes and pops can
        #: take numbers they never use, so there are holes, strands and pending claims.
        self._sequences = dialect.supports_sequences
        super().__init__(spec, dialect)
        self._claims = Claims()

    def _params(self) -> dict[str, Any]:
        return {"capacity": self.capacity}

    def _may_wait(self, ex: Executor) -> bool:
        """Whether a push may wait for poppers to free a slot: always where other connections
        write while a transaction is open; not inside SQLite's transaction, which holds the
        only write lock a popper would need."""
        return self.dialect.concurrent_writers or not ex.in_transaction()

    def _missing(self, exc: QueueTableMissing) -> QueueTableMissing:
        """A ring whose slot table exists but whose counters do not (a migration that created
        the table without ``create_queue_ring``) is told so, not that its tables are
        missing."""
        counters = [n for n in (self.spec.push_seq, self.spec.pop_seq) if n in str(exc)]
        if not counters:
            return super()._missing(exc)
        return QueueTableMissing(
            f"ring queue {self.spec.table!r}: its tables do not exist in this database, or not "
            f"all of them: its counter {counters[0]!r} does not ({exc}). Apply the migrations "
            f"(Django: manage.py migrate; SQLAlchemy: metadata.create_all() or alembic "
            f"upgrade). If the slot table exists, the migration that made it lacks the ring "
            f"operation that makes its slots and counters: Django's RingSlots index "
            f"(makemigrations writes it), SQLAlchemy's op.create_queue_ring("
            f"{self.spec.table!r}, {self.capacity}) (autogenerate writes it), or "
            f"dbqueue.schema.create_ring_statements()"
        )

    def _mismatch(self, detail: str) -> RingCapacityMismatch:
        return RingCapacityMismatch(
            f"ring queue {self.spec.table!r} declares capacity {self.capacity} but its table "
            f"does not match ({detail}). Changing capacity needs a migration while the ring is "
            f"empty (Django: makemigrations + migrate; SQLAlchemy: an Alembic revision with "
            f"op.alter_queue_ring, which autogenerate writes), and the ring drained by workers "
            f"of the code that still declares its current capacity; see the ring queue docs"
        )

    def _check_number(self, number: int, slot_seq: int | None) -> None:
        """Raise RingCapacityMismatch unless ``slot_seq`` is a number of ``number``'s slot."""
        if slot_seq is None or slot_seq % self.capacity != number % self.capacity:
            raise self._mismatch(f"slot {number % self.capacity} holds number {slot_seq}")

    def _messages(self, ex: Executor, rows: list[Row], leased: bool) -> list[Message]:
        """The messages of a pop's rows that took one, in number order (each read on its own,
        see :meth:`~dbqueue.layout.Layout._read_each`)."""
        t = self.dialect.time_result
        decode = self.codec.decode

        def read(r: Row) -> Message:
            row = PopRow._make(r[:PAYLOAD_AT])
            pushed = t(row.pushed_at)
            return Message(
                id=int(row.number),
                attempts=int(row.attempts or 0),
                priority=0,
                run_at=pushed,  # type: ignore[arg-type]
                lease_until=t(row.lease_until),
                enqueued_at=pushed,  # type: ignore[arg-type]
                last_error=row.last_error,
                payload=decode(r, PAYLOAD_AT),
            )

        def token(r: Row) -> tuple[int, int | None]:
            row = PopRow._make(r[:PAYLOAD_AT])
            return int(row.number), int(row.attempts or 0)

        # Filtered on the one column: each taken row is made a PopRow once, when it is read.
        taken = [r for r in rows if r[TAKEN_AT]]
        messages = self._read_each(ex, taken, read, token, leased=leased)
        messages.sort(key=lambda m: m.id)
        return messages

    def return_due(self, ex: Executor, *, batch: int | None = None) -> int:
        """Push the side table's due ready messages again at the tail; how many (the
        sweeper's, :class:`~dbqueue.ring.sweeper.RingSweeper`)."""
        raise NotImplementedError

    def _sleep(self, ex: Executor, seconds: float) -> None:
        # The executor's own sleep where it has one: under SQLAlchemy's asyncio (run_sync) a
        # time.sleep would stop the event loop for the whole wait.
        getattr(ex, "sleep", time.sleep)(seconds)

    def return_now(self, ex: Executor) -> bool:
        """:meth:`return_due` for a pop, retry or release, waiting out another sweeper; True
        if messages may now be in the ring."""
        raise NotImplementedError

    @property
    def _hole_timeout(self) -> float:
        return self.spec.options.hole_timeout.total_seconds()
