"""The queues in a database, for the CLI's ``stats``, ``retry`` and ``purge``: declared by
mapped classes, or found by looking at the tables when no class is at hand; and working
through many of a queue's items in batches (:func:`in_batches`).

Which tables are queues is :func:`dbqueue.discovery.layout_of`'s rule; whatever else is in
the database is left alone. A found queue's spec is built from its reflected columns with
:func:`dbqueue_sa.spec.to_field`, and a ring's capacity is its number of slots. The payload
kinds are best effort (what a reflected type says is how a value is stored, not how the
application declared it), which is enough for the operations here: none of them encodes or
decodes a payload.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from dbqueue import discovery
from dbqueue.errors import InvalidSpec
from dbqueue.front import AnyQueue, ExecutorFront, FrontQueue
from dbqueue.message import Message, State, StateSelector
from dbqueue.ring import RingQueue, SlotState
from dbqueue.ring.states import SLOT_OF_SELECTOR
from dbqueue.schema import FAILED_BASE_COLUMNS, SPLIT_BASE_COLUMNS
from dbqueue.spec import Field, FieldKind, QueueOptions, QueueSpec
from dbqueue.split import SplitQueue
from dbqueue_sa.executor import SAExecutor
from dbqueue_sa.mixins import RingQueueMixin
from dbqueue_sa.queue import SAQueue
from dbqueue_sa.spec import to_field
from dbqueue_sa.tables import core_dialect_of

log = logging.getLogger("dbqueue.cli")


@dataclass(frozen=True, slots=True)
class Ids:
    """Where the ids of some of a queue's items are: a column, and which rows."""

    column: sa.Column[Any]
    where: sa.ColumnElement[bool]


@dataclass(frozen=True, slots=True)
class FoundQueue(discovery.FoundQueue):
    """A queue in the database (:class:`dbqueue.discovery.FoundQueue`), and the tables its
    items are listed from (split: the meta table; ring: the slot table and the failed
    table)."""

    items: sa.Table
    failed: sa.Table | None = None
    #: The mapped class, for a declared queue.
    model: type[Any] | None = None

    @property
    def name(self) -> str:
        """The queue's table, and for a consumer group its name (``orders[email]``)."""
        spec = self.spec
        return spec.table if spec.group is None else f"{spec.table}[{spec.group}]"

    def on(self, connection: sa.Connection) -> ExecutorFront[Message]:
        """The queue on ``connection``, as the front layer runs it."""
        return ExecutorFront(self.core(connection), SAExecutor(connection))

    def core(self, connection: sa.Connection) -> AnyQueue:
        """The core queue (the class's own for a declared queue)."""
        if self.model is not None:
            queue: SAQueue[Any] = self.model.queue
            if self.spec.group is not None:
                queue = queue.group(self.spec.group)
            return queue.core(connection)
        layout = RingQueue if self.ring else SplitQueue
        return layout(self.spec, core_dialect_of(connection.dialect))

    def in_state(self, selected: StateSelector | State | str | None, now: Any = None) -> list[Ids]:
        """Where the ids of the items ``selected`` (None: every item) are, as the core's
        ``purge`` takes them (:class:`~dbqueue.message.StateSelector`): ready items are due
        at ``now`` (a value bound as the core binds its times), scheduled ones later. A ring's
        ready and leased items are in its ready and leased slots (numbered by ``seq``) and in
        its side table with that state, its scheduled and failed items in the side table; it
        has no done ones."""
        state = None if selected is None else StateSelector.parse(selected)
        if state is not None and state.due is not None and now is None:
            raise ValueError(f"{state} items are told apart by their due time: pass now")
        table = self.items if self.failed is None else self.failed
        where: sa.ColumnElement[bool] = sa.true()
        if state is not None:
            where = table.c.state == int(state.state)
            if state.due is not None:
                due = table.c.run_at <= sa.literal(now)
                where = sa.and_(where, due if state.due else sa.not_(due))
            cancellable = (StateSelector.LEASED, StateSelector.CANCELLED)
            if self.failed is None and state in cancellable and now is not None:
                # A cancelling item is leased until its lease ends, then cancelled, as the
                # core's purge takes it (split_purge).
                ended = table.c.lease_until < sa.literal(now)
                cancelling = sa.and_(
                    table.c.state == int(State.CANCELLING),
                    ended if state is StateSelector.CANCELLED else sa.not_(ended),
                )
                where = sa.or_(where, cancelling)
        if self.failed is None:
            return [Ids(self.items.c.id, where)]
        seq, slot_state = self.items.c.seq, self.items.c.state
        aside = Ids(self.failed.c.id, where)
        if state is None:
            return [Ids(seq, slot_state != SlotState.EMPTY), aside]
        if state in SLOT_OF_SELECTOR:
            return [Ids(seq, slot_state == SLOT_OF_SELECTOR[state]), aside]
        return [] if state is StateSelector.DONE else [aside]

    def failed_items(self) -> Ids:
        """Where the ids of the failed items are (what ``retry`` takes)."""
        (ids,) = self.in_state(StateSelector.FAILED)
        return ids


def declared(classes: Iterable[type[Any]]) -> list[FoundQueue]:
    """The queues of mapped queue classes, by table name; a queue with consumer groups as one
    queue per group, named ``table[group]``."""
    found: list[FoundQueue] = []
    for cls in classes:
        if issubclass(cls, RingQueueMixin) and cls.__queue_spec__.fans_out:
            ring: QueueSpec = cls.__queue_spec__
            found.extend(
                FoundQueue(ring.for_group(g), state, cls.__queue_group_failed__[g], cls)
                for g, state in cls.__queue_group_tables__.items()
            )
        elif issubclass(cls, RingQueueMixin):
            slots = sa.inspect(cls).local_table
            found.append(FoundQueue(cls.__queue_spec__, slots, cls.__queue_failed__, cls))
        elif cls.__queue_spec__.fans_out:  # each consumer group is a queue of its own here
            spec: QueueSpec = cls.__queue_spec__
            found.extend(
                FoundQueue(spec.for_group(group), table, model=cls)
                for group, table in cls.__queue_group_tables__.items()
            )
        else:
            found.append(FoundQueue(cls.__queue_spec__, cls.__queue_meta__, model=cls))
    return sorted(found, key=lambda q: q.name)


def discover(connection: sa.Connection) -> list[FoundQueue]:
    """The queues in the connection's default schema, by table name. Runs in the
    connection's transaction, or in one of its own that it ends (so the caller can begin
    the next)."""
    if connection.in_transaction():
        return _discover(connection)
    with connection.begin():
        return _discover(connection)


def _discover(connection: sa.Connection) -> list[FoundQueue]:
    inspector = sa.inspect(connection)
    names = set(inspector.get_table_names())
    tables = discovery.candidates(names)
    wanted = {n for t in tables for n in discovery.related_tables(t, names)}
    if not wanted:
        return []
    # One catalog query for every candidate table, rather than one per table.
    reflected = inspector.get_multi_columns(filter_names=sorted(wanted))
    columns = {name: cols for (_, name), cols in reflected.items()}
    column_names = {name: [c["name"] for c in cols] for name, cols in columns.items()}
    metadata = sa.MetaData()
    found = []
    for table in tables:
        try:
            layout = discovery.layout_of(table, column_names)
            if layout == discovery.SPLIT:
                found.extend(_split(metadata, columns, table, column_names))
            elif layout == discovery.RING:
                found.extend(_ring(connection, metadata, columns, table, column_names))
        except InvalidSpec as exc:
            # Not a name or a column set a queue could have: not one of ours.
            log.debug("table %r is not a queue: %s", table, exc)
    return found


def _table(metadata: sa.MetaData, name: str, columns: Sequence[dict[str, Any]]) -> sa.Table:
    # Name, type and nullability only: a reflected server default (a split table's identity,
    # a slot's "DEFAULT 0") is the layout's, not a payload default a push would apply.
    return sa.Table(
        name,
        metadata,
        *(sa.Column(c["name"], c["type"], nullable=c["nullable"]) for c in columns),
    )


def _fields(table: sa.Table, base: frozenset[str]) -> tuple[Field, ...]:
    fields = []
    for column in table.columns:
        if column.name in base:
            continue
        if isinstance(column.type, sa.DateTime) and not column.type.timezone:
            # SQLite has no zoned timestamp type (the queue's own code makes every datetime
            # aware there), and a PostgreSQL "timestamp" payload is stored as written: the
            # zone only matters to a push, which nothing here does.
            column = sa.Column(column.name, sa.DateTime(timezone=True), nullable=column.nullable)
        try:
            fields.append(to_field(column, table.name))
        except InvalidSpec:
            # A type no queue declares (a table created by hand, say): stored as text as far
            # as stats, retry and purge are concerned.
            fields.append(Field(column.name, FieldKind.TEXT, nullable=True))
    return tuple(fields)


def _split(
    metadata: sa.MetaData,
    columns: dict[str, Any],
    table: str,
    column_names: dict[str, list[str]],
) -> list[FoundQueue]:
    """A split queue; one with consumer groups as one queue per group, ``table[group]``, as
    :func:`declared` lists them (the groups in name order: the database keeps no other)."""
    data = _table(metadata, table, columns[table])
    fields = _fields(data, SPLIT_BASE_COLUMNS)
    if f"{table}_meta" in columns:
        meta = _table(metadata, f"{table}_meta", columns[f"{table}_meta"])
        return [FoundQueue(QueueSpec(table, fields), meta)]
    spec = QueueSpec(table, fields, QueueOptions(groups=discovery.groups_of(table, column_names)))
    groups = [spec.for_group(g) for g in spec.options.groups]
    return [FoundQueue(g, _table(metadata, g.meta_table, columns[g.meta_table])) for g in groups]


def _ring(
    connection: sa.Connection,
    metadata: sa.MetaData,
    columns: dict[str, Any],
    table: str,
    column_names: dict[str, list[str]],
) -> list[FoundQueue]:
    """A ring; one with consumer groups as one queue per group, ``table[group]`` (its items in
    the group's state and side tables)."""
    slots = _table(metadata, table, columns[table])
    failed = _table(metadata, f"{table}_failed", columns[f"{table}_failed"])
    capacity = connection.execute(sa.select(sa.func.count()).select_from(slots)).scalar_one()
    if not capacity:
        raise InvalidSpec(f"ring table {table!r} has no slots")
    # The failed table's payload columns keep the declared nullability (the slots' are all
    # nullable: an empty slot holds no message).
    fields = _fields(failed, FAILED_BASE_COLUMNS)
    groups = discovery.groups_of(table, column_names)
    spec = QueueSpec(table, fields, QueueOptions(capacity=capacity, groups=groups))
    if not groups:
        return [FoundQueue(spec, slots, failed)]
    return [
        FoundQueue(
            g,
            _table(metadata, g.state_table, columns[g.state_table]),
            _table(metadata, g.failed_table, columns[g.failed_table]),
        )
        for g in spec.group_specs
    ]


# -- many items, in batches -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Span:
    """Items to work through: where their ids are, how many there were and the highest id
    when counted (items arriving later are left alone, so the work ends)."""

    ids: Ids
    total: int
    top: int | None


def count_items(connection: sa.Connection, sources: Sequence[Ids]) -> list[Span]:
    """The items of ``sources`` as they are now (in a transaction of their own)."""
    spans = []
    with connection.begin():
        for ids in sources:
            query = sa.select(sa.func.count(), sa.func.max(ids.column)).where(ids.where)
            total, top = connection.execute(query).one()
            spans.append(Span(ids, int(total), top))
    return spans


def in_batches(
    connection: sa.Connection,
    core: AnyQueue,
    spans: Sequence[Span],
    action: Callable[[FrontQueue[Any], list[int]], int],
    progress: Callable[[int], object],
    size: int,
) -> int:
    """Run ``action`` (a queue operation by ids: ``FrontQueue.retry``, ``FrontQueue.delete``)
    on the ids of ``spans``, ``size`` at a time, each batch in a transaction of its own, so no
    lock is held for long; call ``progress`` with each batch's result and return their sum."""
    changed = 0
    for span in spans:
        column, last = span.ids.column, None
        while span.top is not None:
            query = (
                sa.select(column)
                .where(span.ids.where, column <= span.top)
                .order_by(column)
                .limit(size)
                # PostgreSQL: rows a worker holds are skipped, and the rows taken cannot change
                # state before the action runs (a ready item purged while a worker pops it).
                .with_for_update(skip_locked=True)
            )
            if last is not None:
                query = query.where(column > last)
            with connection.begin():
                ex = SAExecutor(connection)
                # SQLite has no row locks: atomic() takes its write lock before the ids are
                # read, to the same end.
                with ex.atomic():
                    ids = list(connection.execute(query).scalars())
                    n = action(ExecutorFront(core, ex), ids) if ids else 0
            if not ids:
                break
            last = ids[-1]
            changed += n
            progress(n)
    return changed
