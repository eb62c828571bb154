"""What a database can do and how it stores values: capability flags, not vendor checks."""

from __future__ import annotations

import datetime as dt
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from dbqueue.spec import Field, FieldKind

Converter = Callable[[Any], Any]


class Dialect(ABC):
    """One database engine as the core sees it.

    Adapters never ask "which vendor is this?": they ask a capability (``supports_skip_locked``)
    or call a method here, so adding an engine is adding a subclass and a SQL file.
    """

    name: ClassVar[str]
    #: ``FOR UPDATE SKIP LOCKED``: concurrent poppers do not wait for each other's rows.
    supports_skip_locked: ClassVar[bool] = False
    #: Several tables change in one statement (``WITH ... INSERT/UPDATE/DELETE``).
    supports_writable_cte: ClassVar[bool] = False
    #: Arrays bind as one parameter, so a batch push is one statement over ``unnest``.
    supports_array_params: ClassVar[bool] = False
    #: Per-table storage parameters (fillfactor, autovacuum thresholds).
    supports_storage_parameters: ClassVar[bool] = False
    #: ``LISTEN``/``NOTIFY`` wake-ups.
    supports_listen_notify: ClassVar[bool] = False
    #: The database has no clock we want to use (SQLite): times are passed in as parameters.
    client_clock: ClassVar[bool] = False
    #: ``RETURNING`` rows come back in the statement's ``ORDER BY`` order.
    orders_returning: ClassVar[bool] = False
    #: Numbers come from sequences, outside transactions: a number taken by a statement that
    #: rolls back, or by a client that dies, is gone (a ring has holes, strands and pending pop
    #: claims to repair). Without, a ring's counters are rows changed in the same transaction.
    supports_sequences: ClassVar[bool] = False
    #: Other connections write while a transaction is open (row locks, not one write lock for
    #: the database): a push inside a transaction may wait for poppers to free a slot.
    concurrent_writers: ClassVar[bool] = False
    #: An update or a delete leaves the old row version in the table until vacuum removes it,
    #: which a long transaction forbids (multiversion storage): a queue's tables need
    #: compaction then (dbqueue.upkeep.compaction).
    keeps_dead_versions: ClassVar[bool] = False

    def quote(self, identifier: str) -> str:
        """Quote an identifier that a :class:`~dbqueue.spec.QueueSpec` has already validated."""
        return '"' + identifier.replace('"', '""') + '"'

    @abstractmethod
    def param(self, name: str) -> str:
        """The placeholder for the named parameter ``name``."""

    def payload_param(self, name: str, f: Field) -> str:
        """The placeholder for a payload value in an INSERT (a cast where the driver needs one)."""
        return self.param(name)

    def payload_select(self, alias: str, f: Field) -> str:
        """The expression that selects a payload column as the codec expects to read it."""
        return f"{alias}.{self.quote(f.name)}"

    @abstractmethod
    def column_type(self, f: Field) -> str:
        """The column type of a payload field, as the adapters' migrations create it."""

    def array(self, values: Sequence[Any]) -> Any:
        """A list bound as one parameter."""
        return list(values)

    def array_param(self, name: str) -> str:
        """The placeholder for an array parameter (``supports_array_params``)."""
        return self.param(name)

    def array_type(self, kind: FieldKind) -> str:
        """The SQL array type a batch of ``kind`` values is cast to (``supports_array_params``)."""
        raise NotImplementedError(f"{self.name} has no array parameters")

    def encoder(self, kind: FieldKind) -> Converter | None:
        """How a validated value of ``kind`` is bound; None means as it is."""
        return None

    def decoder(self, kind: FieldKind, aware: bool) -> Converter | None:
        """How a fetched value of ``kind`` becomes a Python value; None means as it is."""
        return None

    def time_param(self, value: dt.datetime | None) -> Any:
        """A meta-table timestamp bound from Python (only where ``client_clock``)."""
        return value

    def time_result(self, value: Any) -> dt.datetime | None:
        """A meta-table timestamp as fetched, made an aware datetime."""
        return value  # type: ignore[no-any-return]

    @abstractmethod
    def period_start(self, period_param: str) -> str:
        """SQL text of the start of the current period of ``period_param`` seconds (a bound
        parameter), as ISO 8601 UTC text: the suffix of a unique key with a period
        (:mod:`dbqueue.unique`)."""
