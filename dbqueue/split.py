"""The split queue: hot meta columns in ``<table>_meta``, the payload in ``<table>``.

Each operation validates its input completely, then runs ONE named statement of the dialect
(``sql/<dialect>/split.sql``) through an :class:`~dbqueue.executor.Executor`. Nothing here knows
a framework; the Django and SQLAlchemy adapters wrap this class.

Consumer groups (fan-out, ``QueueOptions.groups``): each group has a meta table of its own,
``<table>_meta_<group>``, over the one data table. A push into the queue writes the payload
once and a meta row in every group's table, in one statement; :meth:`SplitQueue.group` is the
queue as one group sees it, with every operation of a split queue on that group's deliveries
(its own leases, attempts, retries, failed items and last errors). An item's data row goes
with the last of its meta rows (``sql/<dialect>/split_groups.sql``). Per-group rows were chosen
over a cursor per group: a cursor needs the ring's claims protocol to let several workers of a
group share it, and gives each group's failed items nowhere to live.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple, cast

from dbqueue.arguments import (
    ZERO,
    Token,
    TokenLike,
    check_duration,
    check_priority,
    check_run_at,
    fenced,
    positive,
    to_tokens,
)
from dbqueue.codec import payload_rows
from dbqueue.errors import InvalidArgument, UniqueKeyConflict, shown
from dbqueue.executor import Executor, Row, UnloadedRow, columns_from
from dbqueue.layout import RESCUE_ERROR, Layout, log
from dbqueue.message import CancelOutcome, Message, QueueStats, RescueResult, State
from dbqueue.outage import is_unique_violation
from dbqueue.rows import NumberRow, StateRow, ValueRow
from dbqueue.sql import Statement
from dbqueue.unique import Pushed, item_keys

__all__ = ["SplitQueue", "TokenLike"]


def data_row(message: Message) -> dict[str, Any]:
    """The data table's columns for a popped message, as the adapters build model instances
    from them (the meta columns are the message's attributes)."""
    return {
        **message.payload,
        "id": message.id,
        "enqueued_at": message.enqueued_at,
        "last_error": message.last_error,
    }


class CancelRow(NamedTuple):
    """A row of ``split_cancel``: an item found, its state now, and whether the cancel
    changed it."""

    id: int
    state: int
    changed: Any


#: What cancel() reports of an item it left as it was, by its state.
UNCHANGED = {
    State.CANCELLED: CancelOutcome.ALREADY,
    State.CANCELLING: CancelOutcome.ALREADY,
    State.DONE: CancelOutcome.FINISHED,
    State.FAILED: CancelOutcome.FINISHED,
}


class KeyRow(NamedTuple):
    """A row of a unique batch push (``split_push_many_unique``): the id written, None for a
    duplicate, and the key as stored."""

    id: int | None
    key: str


class UniquePushRow(NamedTuple):
    """The row of a unique push (``split_push_unique``): a :class:`KeyRow`, and the holder of
    a duplicate's key if the statement saw it."""

    id: int | None
    key: str
    holder: int | None


class HolderRow(NamedTuple):
    """A row of ``split_unique_holders``: the item that holds a key."""

    id: int
    key: str


#: How many times a unique push looks for its key's holder before it gives up.
HOLDER_TRIES = 5


class PopRow(NamedTuple):
    """The first columns of a pop's row (``split_pop_leased``...): the payload follows."""

    id: int
    attempts: int
    priority: int
    run_at: Any
    lease_until: Any
    enqueued_at: Any
    last_error: str | None


#: Where a pop's row has its id and enqueued_at (NULL: an orphan meta row), and its payload.
ID_AT = PopRow._fields.index("id")
ENQUEUED_AT = PopRow._fields.index("enqueued_at")
PAYLOAD_AT = len(PopRow._fields)


#: With ``QueueOptions.keep_done``, the statements that mark items done instead of removing
#: them, by the operation they replace.
KEEP_DONE_OPERATIONS = {"ack": "ack_done", "ack_pop": "ack_pop_done", "pop_remove": "pop_done"}


class SplitQueue(Layout):
    """Operations on one split queue for one dialect. Thread-safe: it holds no connection.

    With ``QueueOptions.keep_done`` every way an item leaves the queue successfully (ack,
    ack_pop, the at_most_once and transactional pops) marks it done (state 2, ``run_at`` = when
    it finished, its data row kept) instead of deleting it; ``purge("done")`` or the archive
    job removes done items.
    """

    layout = "split"
    fan_out_operations = frozenset({"push", "push_many", "pushed", "notify"})
    push_operations = frozenset({"push", "push_many", "push_unique", "push_many_unique"})
    #: PostgreSQL: the data table's identity sequence, read at the first unique push (a core
    #: queue serves one database: see dbqueue.front.shared_core).
    _id_seq: str | None = None

    def model_row(self, message: Message) -> dict[str, Any]:
        """The data table's columns (:func:`data_row`)."""
        return data_row(message)

    def model_extras(self, message: Message) -> dict[str, Any]:
        """The meta table's columns, which the model's instance shows as attributes."""
        return {
            "attempts": message.attempts,
            "priority": message.priority,
            "run_at": message.run_at,
            "lease_until": message.lease_until,
        }

    def _statement(self, operation: str) -> Statement:
        if self.spec.options.keep_done:
            operation = KEEP_DONE_OPERATIONS.get(operation, operation)
        return super()._statement(operation)

    def delete(self, ex: Executor, ids: Iterable[TokenLike] | int) -> int:
        """Delete items by id, whatever their state; return how many. A queue with consumer
        groups deletes them from every group (the count is of items); a group, from its own
        deliveries only (an item no group holds any more is gone)."""
        if not self.spec.fans_out:
            return super().delete(ex, ids)
        wanted = self._ids(ids)
        if not wanted:
            return 0
        with ex.atomic():
            found: set[int] = set()
            for name in self.spec.options.groups:
                group = self.group(name)
                found.update(int(r[0]) for r in group._run(
                    ex, "delete", {"ids": self.dialect.array(wanted)}))  # fmt: skip
        return len(found)

    # -- push ---------------------------------------------------------------------------------

    def _schedule(
        self, priority: int, delay: dt.timedelta | None, run_at: dt.datetime | None
    ) -> dict[str, Any]:
        check_priority(priority)
        if delay is not None and run_at is not None:
            raise InvalidArgument("pass delay= or run_at=, not both")
        if delay is not None:
            check_duration("delay", delay, zero=True)
        if run_at is not None:
            check_run_at("run_at", run_at)
        if self.dialect.client_clock:
            params = self._clock(run_at=delay or ZERO)
            if run_at is not None:
                params["run_at"] = self.dialect.time_param(run_at)
            params["priority"] = priority
            return params
        return {"priority": priority, "run_at": run_at, "delay": delay or ZERO}

    def push(
        self,
        ex: Executor,
        payload: Mapping[str, Any],
        *,
        priority: int = 0,
        delay: dt.timedelta | None = None,
        run_at: dt.datetime | None = None,
        unique_key: str | None = None,
    ) -> Pushed:
        """Enqueue one item in the executor's transaction; return its id.

        In a unique queue (:mod:`dbqueue.unique`) an item holding the push's key (``unique_key``,
        or the one its declared fields make) is returned instead, as ``Pushed(id,
        duplicate=True)``, and nothing is written.
        """
        params = dict(zip(self._param_names, self.codec.encode(payload), strict=True))
        (key,) = self._keys([payload], unique_key)
        params.update(self._schedule(priority, delay, run_at))
        if key is not None:
            return self._push_unique(ex, params, key)
        item_id = int(self._rows(ex, "push", params, NumberRow)[0].number)
        self._wake(ex)
        return Pushed(item_id)

    def push_many(
        self,
        ex: Executor,
        rows: Iterable[Mapping[str, Any]],
        *,
        priority: int = 0,
        delay: dt.timedelta | None = None,
        run_at: dt.datetime | None = None,
        batch_size: int | None = None,
    ) -> list[Pushed]:
        """Enqueue many items, one statement per batch; return their ids in input order.

        Every row is validated before the first statement runs; several batches run in one
        transaction, so a failure leaves nothing behind. In a unique queue whose ``unique``
        fields make keys, a row whose key an item holds (or an earlier row of the batch took)
        gets that item's id, with ``duplicate`` True.
        """
        schedule = self._schedule(priority, delay, run_at)
        payloads: list[Mapping[str, Any]] = []
        if self.spec.options.is_unique:  # read once: the keys come from the rows too
            payloads = payload_rows(rows)
            encoded = [self.codec.encode(r) for r in payloads]
        else:
            encoded = self.codec.encode_many(rows)
        size = positive("batch_size", batch_size, self.spec.options.push_many_batch)
        if not encoded:
            return []
        keys = self._keys(payloads) if payloads else [None]
        if keys[0] is not None:
            pushed = self._push_many_unique(ex, encoded, keys, schedule, size)
            self._wake(ex)
            return pushed
        chunks = [encoded[i : i + size] for i in range(0, len(encoded), size)]
        if len(chunks) == 1 and self.dialect.supports_array_params:
            ids = self._push_chunk(ex, chunks[0], schedule)
        else:
            with ex.atomic():
                ids = [i for chunk in chunks for i in self._push_chunk(ex, chunk, schedule)]
        self._wake(ex)
        return [Pushed(i) for i in ids]

    # -- unique items (dbqueue.unique) ---------------------------------------------------------

    def _keys(
        self, payloads: list[Mapping[str, Any]], explicit: str | None = None
    ) -> list[str | None]:
        """Each payload's unique key, or None each where the queue or the push has none."""
        options = self.spec.options
        if not options.is_unique:
            if explicit is not None:
                raise InvalidArgument(
                    f"queue {self.spec.table!r} has no unique items, so a push takes no "
                    f"unique_key: declare QueueOptions.unique (fields) or unique_scope"
                )
            return [None for _ in payloads]
        return item_keys(options.unique, [self._with_defaults(p) for p in payloads], explicit)

    def _with_defaults(self, payload: Mapping[str, Any]) -> Mapping[str, Any]:
        """``payload`` with the defaults of the unique fields it leaves out (their key part is
        the value the item gets)."""
        missing = [f for f in self.spec.fields if f.name in self.spec.options.unique
                   and f.name not in payload]  # fmt: skip
        if not missing:
            return payload
        return {**payload, **{f.name: f.default_value() for f in missing}}

    def _unique_params(self, ex: Executor) -> dict[str, Any]:
        """What every unique push binds: the period, and where the data table's ids come from
        (SQLite: its AUTOINCREMENT row; PostgreSQL: its identity sequence, looked up once)."""
        period = self.spec.options.unique_period
        params: dict[str, Any] = {}
        if period is not None:
            params["unique_period"] = int(period.total_seconds())
        if self.dialect.client_clock:
            params["table"] = self.spec.table
        else:
            if self._id_seq is None:  # threads racing here all read the same name
                row = self._rows(ex, "unique_id_sequence", {}, ValueRow)[0]
                self._id_seq = str(row.value)
            params["id_seq"] = self._id_seq
        return params

    def _push_unique(self, ex: Executor, params: dict[str, Any], key: str) -> Pushed:
        """One push of a unique item: written, or its key's holder (read again if the holder
        finished between the two statements, at most a few times)."""
        params = {**params, **self._unique_params(ex), "unique_key": key, **self._clock()}
        for _ in range(HOLDER_TRIES):
            row = self._rows(ex, "push_unique", params, UniquePushRow)[0]
            if row.id is not None:
                self._wake(ex)
                return Pushed(int(row.id))
            if row.holder is not None:  # an item the push's snapshot sees
                return Pushed(int(row.holder), duplicate=True)
            holders = self._holders(ex, [row.key])
            if row.key in holders:
                return Pushed(holders[row.key], duplicate=True)
        raise UniqueKeyConflict(self._holder_gone(key))

    def _push_many_unique(
        self,
        ex: Executor,
        encoded: list[list[Any]],
        keys: list[str | None],
        schedule: dict[str, Any],
        size: int,
    ) -> list[Pushed]:
        """push_many of a unique queue: the rows written, each skipped one its key's holder."""
        if not self.dialect.supports_array_params:  # SQLite: a push per row, one transaction
            with ex.atomic():
                return [
                    self._push_unique(ex, dict(zip(self._param_names, v, strict=True), **schedule),
                                      cast(str, k))
                    for v, k in zip(encoded, keys, strict=True)
                ]  # fmt: skip
        with ex.atomic():
            pushed: list[Pushed] = []
            for start in range(0, len(encoded), size):
                pushed += self._push_unique_chunk(
                    ex, encoded[start : start + size], keys[start : start + size], schedule
                )
            return pushed

    def _push_unique_chunk(
        self,
        ex: Executor,
        chunk: list[list[Any]],
        keys: list[str | None],
        schedule: dict[str, Any],
    ) -> list[Pushed]:
        params = {**schedule, **self._unique_params(ex), "count": len(chunk), "keys": keys}
        for i, column in enumerate(zip(*chunk, strict=True)):
            params[f"c{i}"] = list(column)
        rows = self._rows(ex, "push_many_unique", params, KeyRow)
        skipped = [r.key for r in rows if r.id is None]
        holders = self._holders(ex, skipped) if skipped else {}
        pushed = []
        for values, key, row in zip(chunk, keys, rows, strict=True):
            if row.id is not None:
                pushed.append(Pushed(int(row.id)))
            elif row.key in holders:
                pushed.append(Pushed(holders[row.key], duplicate=True))
            else:  # the holder finished meanwhile: push the row again
                pushed += self._push_unique_chunk(ex, [values], [key], schedule)
        return pushed

    def _holders(self, ex: Executor, keys: list[str]) -> dict[str, int]:
        """The ids of the items that hold ``keys`` now, by key."""
        params = {"keys": self.dialect.array(keys)}
        return {r.key: int(r.id) for r in self._rows(ex, "unique_holders", params, HolderRow)}

    def retry(self, ex: Executor, ids: Iterable[TokenLike] | int) -> int:
        """Failed items back to ready, attempts reset; return how many. In a unique queue an
        item whose key another item holds now stays failed (a retry must not make a second
        item of one key); one that a push took the key from while this ran raises
        UniqueKeyConflict, with nothing retried. (So does any key conflict of a queue whose
        spec does not say it is unique, as one found in the database by the command line.)"""
        try:
            with ex.atomic():
                return super().retry(ex, ids)
        except Exception as exc:
            if not is_unique_violation(exc):
                raise
            raise UniqueKeyConflict(
                f"queue {self.spec.table!r}: a push took the unique key of an item this retry "
                f"was bringing back; nothing was retried, retry again (the item whose key is "
                f"held then stays failed)"
            ) from None

    def _holder_gone(self, key: str) -> str:
        return (
            f"queue {self.spec.table!r}: an item held unique key {key!r} at each of "
            f"{HOLDER_TRIES} pushes and was gone each time the push looked for it (items of "
            f"that key are pushed and finished faster than a push can read them); push again"
        )

    def _push_chunk(
        self, ex: Executor, chunk: list[list[Any]], schedule: dict[str, Any]
    ) -> list[int]:
        if self.dialect.supports_array_params:
            params = dict(schedule, count=len(chunk))
            for i, column in enumerate(zip(*chunk, strict=True)):
                params[f"c{i}"] = list(column)
            return [r.number for r in self._rows(ex, "push_many", params, NumberRow)]
        ids = []
        for values in chunk:
            params = dict(zip(self._param_names, values, strict=True), **schedule)
            ids.append(int(self._rows(ex, "push_many", params, NumberRow)[0].number))
        return ids

    # -- pop ----------------------------------------------------------------------------------

    def _take(
        self, ex: Executor, operation: str, n: int, params: dict[str, Any]
    ) -> tuple[int, list[Message]]:
        rows = self._run(ex, operation, params)
        acked = 0
        if operation == "ack_pop":  # the first column is the count acked (see split_ack_pop)
            acked = int(ValueRow._make(rows[0][:1]).value)
            rows = [columns_from(r, 1) for r in rows if r[1 + ID_AT] is not None]
        leased = operation != "pop_remove"
        return acked, self._messages(ex, self._without_orphans(ex, rows), leased)

    def _without_orphans(self, ex: Executor, rows: list[Row]) -> list[Row]:
        """The pop's rows but those of orphans: a meta row whose data row is gone (deleted by
        SQL outside dbqueue) comes back without one (NULL enqueued_at, a NOT NULL column of
        the data table). Nothing is left to deliver or to record an error in: the meta row is
        removed (if the pop has not already), and logged."""
        orphans = [
            int(r[ID_AT]) for r in rows if r[ENQUEUED_AT] is None and not isinstance(r, UnloadedRow)
        ]
        if not orphans:
            return rows
        log.warning(
            "queue %r: removed %d messages whose data row was deleted outside dbqueue: %s",
            self.spec.table, len(orphans), orphans,
        )  # fmt: skip
        self._run(ex, "delete", {"ids": self.dialect.array(orphans)})
        gone = set(orphans)
        return [r for r in rows if int(r[ID_AT]) not in gone]

    def _messages(self, ex: Executor, rows: list[Row], leased: bool) -> list[Message]:
        t = self.dialect.time_result
        decode = self.codec.decode

        def read(r: Row) -> Message:
            p = PopRow._make(r[:PAYLOAD_AT])
            return Message(
                p.id,
                p.attempts,
                p.priority,
                cast(dt.datetime, t(p.run_at)),  # NOT NULL columns
                t(p.lease_until),
                cast(dt.datetime, t(p.enqueued_at)),  # an orphan's NULL is gone by now
                p.last_error,
                decode(r, PAYLOAD_AT),
            )

        def token(r: Row) -> tuple[int, int]:
            p = PopRow._make(r[:PAYLOAD_AT])
            return int(p.id), int(p.attempts)

        messages = self._read_each(ex, rows, read, token, leased=leased)
        if not self.dialect.orders_returning:
            messages.sort(key=lambda m: (-m.priority, m.run_at, m.id))
        return messages

    # -- acknowledge --------------------------------------------------------------------------

    def _ack_tokens(self, ex: Executor, tokens: list[Token], strict: bool) -> list[int]:
        if self.spec.options.keep_done:  # one update marks each row done, or cancelled
            return super()._ack_tokens(ex, tokens, strict)
        # The ack deletes the leased rows; the cancelling ones, kept and cancelled, take a
        # second statement, run only when the ack took fewer rows than it was given (a
        # cancellation, or a lost lease): the hot path stays one statement.
        params = {**self._token_params(tokens), "strict": strict}
        acked = [int(r.number) for r in self._rows(ex, "ack", params, NumberRow)]
        if len(acked) < len(tokens):
            taken = set(acked)
            acked += self._ack_cancelling(ex, [t for t in tokens if t[0] not in taken], strict)
        if strict:
            self._check_leased(ex, tokens, acked, "ack")
        return acked

    def _ack_cancelling(self, ex: Executor, tokens: list[Token], strict: bool) -> list[int]:
        """Record the held items of ``tokens`` whose cancellation was requested as cancelled
        (strict: all the tokens held, or none); the ids. Between the two statements of an ack
        no one else takes a held row: a rescue leaves cancelling rows alone."""
        params = {**self._token_params(tokens), "strict": strict, **self._clock()}
        return [int(r.number) for r in self._rows(ex, "ack_cancelling", params, NumberRow)]

    def ack_pop(
        self,
        ex: Executor,
        items: TokenLike,
        n: int,
        *,
        lease: dt.timedelta | None = None,
    ) -> tuple[int, list[Message]]:
        acked, messages = super().ack_pop(ex, items, n, lease=lease)
        # split_ack_pop deletes the leased rows only (see _ack_tokens); SQLite acks through it.
        tokens = fenced(items, "ack_pop")
        own_statement = self.dialect.supports_writable_cte and not self.spec.options.keep_done
        if own_statement and acked < len(tokens):
            acked += len(self._ack_cancelling(ex, tokens, False))
        return acked, messages

    # -- cancellation -------------------------------------------------------------------------

    def cancel(self, ex: Executor, ids: Iterable[TokenLike] | int) -> dict[int, CancelOutcome]:
        """Cancel items by id (or instance): a ready one (due now or scheduled) at once, in
        one conditional UPDATE, so it never runs; a leased one is marked cancelling: its
        handler can check :meth:`cancel_requested`, and its ack, fail or release records it
        cancelled. Others are left as they are. Returns each id's
        :class:`~dbqueue.message.CancelOutcome`, in the order given; a race with a worker is
        an outcome, never an error."""
        wanted = self._ids(ids)
        if not wanted:
            return {}
        params = {"ids": self.dialect.array(wanted), **self._clock()}
        if self.dialect.supports_writable_cte:
            found = {int(r.id): r for r in self._rows(ex, "cancel", params, CancelRow)}
        else:
            # Without data-modifying CTEs (SQLite) the update returns only the rows it
            # changed: the others' states are read in the same transaction.
            with ex.atomic():
                found = {int(r.id): r for r in self._rows(ex, "cancel", params, CancelRow)}
                rest = self.dialect.array([i for i in wanted if i not in found])
                found.update(
                    (int(r.id), r) for r in self._rows(ex, "states", {"ids": rest}, CancelRow)
                )
        outcomes = {}
        for item in wanted:
            row = found.get(item)
            if row is None:
                outcomes[item] = CancelOutcome.MISSING
            elif row.changed:
                cancelled = State(row.state) is State.CANCELLED
                outcomes[item] = CancelOutcome.CANCELLED if cancelled else CancelOutcome.REQUESTED
            else:
                outcomes[item] = UNCHANGED[State(row.state)]
        return outcomes

    def cancel_requested(self, ex: Executor, item: TokenLike) -> bool:
        """Whether ``item`` (an id, a popped message or a model instance) was asked to
        stop: its cancellation was requested (or it is cancelled). One primary-key lookup;
        False for an item that is gone."""
        tokens = to_tokens(item)
        if len(tokens) != 1:
            raise InvalidArgument(f"cancel_requested() takes one item, got {shown(item)}")
        rows = self._rows(ex, "cancel_requested", {"id": tokens[0][0]}, ValueRow)
        return bool(rows and rows[0].value)

    # -- administration -----------------------------------------------------------------------

    def set_priority(self, ex: Executor, ids: Iterable[TokenLike] | int, priority: int) -> int:
        """Give items (any state) a new priority; return how many were found."""
        check_priority(priority)
        ids = self._ids(ids)
        if not ids:
            return 0
        params = {"ids": self.dialect.array(ids), "priority": priority}
        return len(self._run(ex, "set_priority", params))

    def rescue(self, ex: Executor, *, batch: int | None = None) -> RescueResult:
        """Expired leases back to ready (failed after max_attempts), in small batches."""
        size = positive("batch", batch, self.spec.options.rescue_batch)
        ready = failed = 0
        while True:
            params = {
                "n": size,
                "max_attempts": self.spec.options.max_attempts,
                "lock_key": self.spec.lock_key,
                "error": RESCUE_ERROR,
                **self._clock(),
            }
            rows = self._rows(ex, "rescue", params, StateRow)
            ready += sum(1 for r in rows if r.state == State.READY)
            failed += sum(1 for r in rows if r.state == State.FAILED)
            if len(rows) < size:
                return RescueResult(ready, failed)

    def stats(self, ex: Executor) -> QueueStats:
        """Counts per state and the age of the oldest due item."""
        return self._stats(ex)

    def pushed(self, ex: Executor) -> int:
        """How many items were ever pushed (rolled-back pushes included): the last id the
        data table handed out, read from its identity sequence (PostgreSQL) or
        ``sqlite_sequence`` (SQLite), so pushes by any process count. What a metrics scrape
        reports as ``dbqueue_pushed_total``."""
        (row,) = self._rows(ex, "pushed", {"table": self.spec.table}, ValueRow)
        return int(row.value or 0)
