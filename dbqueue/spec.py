"""The validated description of a queue: its table, payload fields and options.

Identifiers that reach SQL come only from a :class:`QueueSpec`, which checks them against an
allow-list pattern and PostgreSQL's 63-byte identifier limit *including* every suffix a layout
adds, so that quoting by the dialect is a second line of defence rather than the only one.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from enum import StrEnum
from typing import Any

from dbqueue.backoff import Backoff
from dbqueue.errors import InvalidArgument, InvalidSpec, shown
from dbqueue.schedules import Schedule, queue_schedules
from dbqueue.unique import UniqueScope

#: Lower-case ASCII identifiers only: the same spelling works unquoted and quoted on every
#: database we support, and no user text can smuggle a quote or a schema prefix in.
IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]*$")
MAX_IDENTIFIER_BYTES = 63
#: The longest suffix any layout appends to the table name (``<t>_push_seq`` needs 9).
LONGEST_SUFFIX = max(
    len(s) for s in ("_meta", "_head", "_push_seq", "_pop_seq", "_failed", "_stage")
)
MAX_TABLE_NAME = MAX_IDENTIFIER_BYTES - LONGEST_SUFFIX
#: A consumer group's meta table is ``<table>_meta_<group>`` (see QueueSpec.for_group), its
#: head table ``<table>_head_<group>``.
GROUP_META_INFIX, GROUP_HEAD_INFIX = "_meta_", "_head_"

#: Column names the layouts use themselves; a payload field cannot take them.
RESERVED_NAMES = frozenset(
    {
        "id", "state", "priority", "run_at", "attempts", "lease_until", "enqueued_at",
        "last_error", "slot", "seq", "pushed_at", "item", "queue_meta", "delay", "mode",
        "using", "token", "queue", "failed_at", "unique_key",
    }
)  # fmt: skip

PRIORITY_MIN, PRIORITY_MAX = -32768, 32767  # smallint


class _NoDefault:
    """The marker of a field that has no default (``None`` is a valid default)."""

    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Any = _NoDefault()
MAX_ATTEMPTS_LIMIT = 32767  # attempts is a smallint
#: A ring's slots are preallocated rows: 2^24 of them is already gigabytes of table.
MAX_CAPACITY = 1 << 24
#: How to fix a ring declaration that sets a split queue's option.
SPLIT_HINT = (
    "a ring queue reuses its slots, so it cannot keep delivered messages; remove it, or "
    "declare a split queue (Django: QueueModel, SQLAlchemy: QueueMixin)"
)


#: A consumer group of a ring has a state table ``<table>_ring_<group>`` (its row of every
#: slot), a side table ``<table>_side_<group>`` and a pop counter ``<table>_pop_<group>``; none
#: of these infixes (nor GROUP_HEAD_INFIX) is longer than GROUP_META_INFIX, so a group name
#: that fits one fits all.
GROUP_STATE_INFIX, GROUP_SIDE_INFIX, GROUP_POP_INFIX = "_ring_", "_side_", "_pop_"
#: Why a queue cannot have both unique items and consumer groups.
GROUPS_UNIQUE_HINT = (
    "a unique key is held by an item's meta row, and a queue with consumer groups has one meta "
    "row per group: declare unique items on a queue without groups"
)
#: The most consumer groups a queue may have: an ack in one group checks every other group's
#: table before it removes an item's payload (dbqueue.split, "Consumer groups").
MAX_GROUPS = 32


#: How to fix a ring declaration that asks for unique items.
UNIQUE_HINT = (
    "a ring's push rewrites a preallocated slot in place without touching an index, and a "
    "unique index on its slots would cost every push and pop that speed; declare a split queue "
    "(Django: QueueModel, SQLAlchemy: QueueMixin) for unique items"
)


class WhenFull(StrEnum):
    """What a push into a full ring does (a ring holding ``capacity`` undelivered messages);
    see the docs' "When the ring is full"."""

    #: The message goes to the overflow (the side table ``<table>_failed``, state "spilled")
    #: and is delivered after the ring's messages: nothing is refused, nothing waits.
    SPILL = "spill"
    #: QueueFull at once: the caller decides (a web request answers 503).
    RAISE = "raise"
    #: Wait up to ``push_timeout`` for a free slot, then QueueFull: back-pressure for
    #: pipelines whose producer may be slowed down, never for a web request.
    WAIT = "wait"


#: push_timeout's default: a ring that declares another one and no when_full means "wait".
DEFAULT_PUSH_TIMEOUT = timedelta(seconds=5)


class FieldKind(StrEnum):
    """The value types a payload field may have; each dialect maps them to a column type."""

    SMALLINT = "smallint"
    INTEGER = "integer"
    BIGINT = "bigint"
    FLOAT = "float"
    DECIMAL = "decimal"
    TEXT = "text"
    BOOLEAN = "boolean"
    DATETIME = "datetime"
    DATE = "date"
    JSON = "json"
    BYTES = "bytes"
    UUID = "uuid"


@dataclass(frozen=True, slots=True)
class Field:
    """One payload column."""

    name: str
    kind: FieldKind
    nullable: bool = False
    max_length: int | None = None  # TEXT only: a varchar(n) column
    max_digits: int | None = None  # DECIMAL only
    decimal_places: int | None = None  # DECIMAL only
    #: Used when a push leaves the field out: a value, or a callable returning one (called for
    #: every push, as Django does). Nullable fields without a default default to None.
    default: Any = NO_DEFAULT
    min_value: int | None = None  # integers only: e.g. 0 for Django's Positive*Field

    @property
    def has_default(self) -> bool:
        """True if a push may leave this field out."""
        return self.default is not NO_DEFAULT or self.nullable

    def default_value(self) -> Any:
        """The value used when a push leaves the field out."""
        if self.default is NO_DEFAULT:
            return None
        return self.default() if callable(self.default) else self.default


#: The default lease: a killed worker's items come back within 10 to 14 s (its lease left,
#: then the next rescue), while a live worker extends what it holds every third of it
#: (bench/reports/2026-11-27-lease.md).
DEFAULT_LEASE = timedelta(seconds=10)


@dataclass(frozen=True, slots=True)
class QueueOptions:
    """Per-queue behaviour. Every option has a default suited to a typical job queue."""

    max_attempts: int = 5
    lease: timedelta = DEFAULT_LEASE
    backoff: Backoff = field(default_factory=Backoff)
    max_payload_bytes: int = 256 * 1024
    push_many_batch: int = 1000
    rescue_batch: int = 500
    #: Wake-ups (PostgreSQL): a push sends NOTIFY on the queue's channel at most once per this
    #: interval per process, so idle workers pick a lone message up in milliseconds while a
    #: busy producer does not take NOTIFY's database-wide commit lock for every message. Zero
    #: notifies at every push; None never (workers then find messages by polling only).
    notify_interval: timedelta | None = timedelta(milliseconds=100)
    #: Datetime payloads must carry a time zone (Django's USE_TZ=True, SQLAlchemy timezone=True).
    aware_datetimes: bool = True
    #: Ring queues only (see dbqueue.ring): the number of preallocated slots, i.e. the most
    #: messages the queue stores at once. None for a split queue.
    capacity: int | None = None
    #: Ring: how long a push waits for a free slot before it raises QueueFull (``when_full``
    #: "wait" only).
    push_timeout: timedelta = DEFAULT_PUSH_TIMEOUT
    #: Ring: what a push that finds the ring full does (:class:`WhenFull`; a name is accepted).
    #: None (not declared): "spill", or "wait" when ``push_timeout`` is declared (what such a
    #: ring did before the option existed); :attr:`when_full_mode` is the one that applies.
    when_full: WhenFull | None = None
    #: Ring: a number a pusher took but never wrote (it rolled back or died) is marked as a
    #: hole after this long, so poppers and later pushers move past it.
    hole_timeout: timedelta = timedelta(seconds=2)
    #: Ring: a message whose number was handed to a popper that never took it (the popper died,
    #: or rolled a transactional pop back) is pushed again by the sweeper after this long.
    stranded_after: timedelta = timedelta(seconds=30)
    #: Split queues only: an item that leaves the queue successfully (ack, ack_pop, and the
    #: removing pops: at_most_once, transactional) is marked done (state 2, run_at = when it
    #: finished, its data row kept) instead of deleted, for an archive job to move out later.
    #: A ring cannot keep it: its slots are reused.
    keep_done: bool = False
    #: At-least-once pops and acks (``pop_batch``, ``ack``, the worker's ``ack_pop``) that run
    #: in their own transaction commit without waiting for their WAL flush on PostgreSQL
    #: (``synchronous_commit = off`` for that transaction only): a server crash may forget the
    #: last fraction of a second of them, whose messages are then delivered again, which
    #: at-least-once allows; a push, and anything in the caller's transaction, still waits.
    #: With ``synchronous_commit = on`` this spares two of the three flushes of a message
    #: popped and acked one by one. True makes them wait like every other commit.
    durable_acks: bool = False
    #: Periodic schedules of the queue (:func:`dbqueue.schedules.periodic_schedule`): every
    #: worker serving the queue pushes their ticks, whatever its handler, exactly once per
    #: tick among them (see :mod:`dbqueue.scheduler`). A list is accepted.
    schedule: tuple[Schedule, ...] = field(default=(), hash=False)
    #: Split queues only (see :mod:`dbqueue.unique`): the payload fields whose values make an
    #: item's unique key, so that a push of the same values returns the item already there
    #: (``push(unique_key=...)`` gives a key of its own instead). A name is accepted.
    unique: tuple[str, ...] = ()
    #: Split queues only: while an item holds its key (:class:`~dbqueue.unique.UniqueScope`; a
    #: name is accepted). Declaring it without ``unique`` deduplicates only the pushes that
    #: pass ``unique_key``. None: "unfinished" if the queue is unique.
    unique_scope: UniqueScope | None = None
    #: Split queues only: one item per key per period (aligned windows, e.g. one per hour of
    #: the clock), on top of the scope.
    unique_period: timedelta | None = None
    #: Split queues only: fan-out. Each item pushed is delivered once to each of these named
    #: consumer groups, each with its own leases, retries, failed items and workers (see
    #: :meth:`QueueSpec.for_group`); its payload is stored once. A name is accepted.
    groups: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        attempts = self.max_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int):
            raise InvalidSpec(f"max_attempts must be an int, got {attempts!r}")
        if not 1 <= self.max_attempts <= MAX_ATTEMPTS_LIMIT:
            raise InvalidSpec(
                f"max_attempts must be between 1 and {MAX_ATTEMPTS_LIMIT}, got {self.max_attempts}"
            )
        if not isinstance(self.lease, timedelta) or self.lease <= timedelta(0):
            raise InvalidSpec(f"lease must be a positive timedelta, got {self.lease!r}")
        if not isinstance(self.backoff, Backoff):
            raise InvalidSpec(f"backoff must be a dbqueue.Backoff, got {self.backoff!r}")
        interval = self.notify_interval
        if interval is not None and (
            not isinstance(interval, timedelta) or interval < timedelta(0)
        ):
            raise InvalidSpec(
                f"notify_interval must be a non-negative timedelta or None, got {interval!r}"
            )
        for name in ("push_timeout", "hole_timeout", "stranded_after"):
            value = getattr(self, name)
            if not isinstance(value, timedelta) or value < timedelta(0):
                raise InvalidSpec(f"{name} must be a non-negative timedelta, got {value!r}")
        self._resolve_when_full()
        capacity = self.capacity
        if capacity is not None and (
            isinstance(capacity, bool)
            or not isinstance(capacity, int)
            or not 1 <= capacity <= MAX_CAPACITY
        ):
            raise InvalidSpec(
                f"capacity must be an int between 1 and {MAX_CAPACITY} (slots), got {capacity!r}"
            )
        for name in ("max_payload_bytes", "push_many_batch", "rescue_batch"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidSpec(f"{name} must be a positive integer, got {value!r}")
        for name in ("keep_done", "durable_acks"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidSpec(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.keep_done and capacity is not None:
            raise InvalidSpec(f"keep_done is an option of split queues only; {SPLIT_HINT}")
        object.__setattr__(self, "schedule", queue_schedules(self.schedule))
        self._resolve_unique()
        self._resolve_groups()

    def _resolve_groups(self) -> None:
        """Store ``groups`` as a tuple of checked names, or raise InvalidSpec (their length is
        checked by QueueSpec, which knows the table's name)."""
        declared: Any = self.groups
        names = (declared,) if isinstance(declared, str) else declared
        if not isinstance(names, tuple | list) or not all(isinstance(n, str) for n in names):
            raise InvalidSpec(f"groups must be a tuple of group names, got {self.groups!r}")
        for name in names:
            check_identifier(name, "consumer group name")
        if len(set(names)) != len(names):
            raise InvalidSpec(f"groups names a group twice: {self.groups!r}")
        if len(names) > MAX_GROUPS:
            raise InvalidSpec(f"a queue has at most {MAX_GROUPS} consumer groups, got {len(names)}")
        object.__setattr__(self, "groups", tuple(names))
        if names and self.is_unique:
            raise InvalidSpec(f"groups and unique items cannot be combined: {GROUPS_UNIQUE_HINT}")

    @property
    def is_unique(self) -> bool:
        """Whether the queue has unique items (its meta table a ``unique_key`` column)."""
        return bool(self.unique) or self.unique_scope is not None or self.unique_period is not None

    @property
    def unique_scope_mode(self) -> UniqueScope:
        """The scope of a unique queue's keys: ``unique_scope``, or "unfinished"."""
        return self.unique_scope or UniqueScope.UNFINISHED

    def _resolve_unique(self) -> None:
        """Store ``unique`` as a tuple and ``unique_scope`` as a UniqueScope, or raise."""
        declared: Any = self.unique  # a declaration may give a name, or a list
        names = (declared,) if isinstance(declared, str) else declared
        if not isinstance(names, tuple | list) or not all(isinstance(n, str) for n in names):
            raise InvalidSpec(f"unique must be a tuple of field names, got {self.unique!r}")
        if len(set(names)) != len(names):
            raise InvalidSpec(f"unique names a field twice: {self.unique!r}")
        object.__setattr__(self, "unique", tuple(names))
        scope = self.unique_scope
        if scope is not None:
            if not isinstance(scope, str) or scope not in set(UniqueScope):
                raise InvalidSpec(
                    f"unique_scope must be one of "
                    f"{', '.join(repr(str(s)) for s in UniqueScope)}, got {scope!r}"
                )
            object.__setattr__(self, "unique_scope", UniqueScope(scope))
        period = self.unique_period
        if period is not None and (
            not isinstance(period, timedelta)
            or period < timedelta(seconds=1)
            or period % timedelta(seconds=1)
        ):
            raise InvalidSpec(
                f"unique_period must be a timedelta of whole seconds, at least one, or None; "
                f"got {period!r}"
            )
        if self.is_unique and self.capacity is not None:
            raise InvalidSpec(f"unique items are an option of split queues only; {UNIQUE_HINT}")

    @property
    def when_full_mode(self) -> WhenFull:
        """What a push into a full ring does: ``when_full``, or if it is not declared "wait"
        where ``push_timeout`` is, else "spill"."""
        if self.when_full is not None:
            return self.when_full
        return WhenFull.WAIT if self.push_timeout != DEFAULT_PUSH_TIMEOUT else WhenFull.SPILL

    def _resolve_when_full(self) -> None:
        """Store a declared ``when_full`` as a WhenFull, or raise InvalidSpec. (Left None when
        not declared: ``dataclasses.replace`` of these options then resolves it afresh.)"""
        value = self.when_full
        if value is None:
            return
        if not isinstance(value, str) or value not in set(WhenFull):
            raise InvalidSpec(
                f"when_full must be one of {', '.join(repr(str(w)) for w in WhenFull)}, "
                f"got {value!r}"
            )
        value = WhenFull(value)
        if self.push_timeout != DEFAULT_PUSH_TIMEOUT and value is not WhenFull.WAIT:
            raise InvalidSpec(
                f"push_timeout applies to when_full='wait' only (a push that waits for a free "
                f"slot); with when_full={str(value)!r} a push never waits: remove push_timeout, "
                f"or declare when_full='wait'"
            )
        object.__setattr__(self, "when_full", value)


#: The option names a declaration may set (``aware_datetimes`` comes from the framework).
OPTION_NAMES = frozenset(QueueOptions.__dataclass_fields__) - {"aware_datetimes"}
#: The options that only a ring queue has (capacity is also required there).
RING_OPTIONS = frozenset(
    {"capacity", "push_timeout", "when_full", "hole_timeout", "stranded_after"}
)
#: The options that only a split queue has: a ring reuses its slots, so it keeps nothing.
SPLIT_OPTIONS = frozenset({"keep_done"})
#: The options of unique items, which only a split queue has (:mod:`dbqueue.unique`).
UNIQUE_OPTIONS = frozenset({"unique", "unique_scope", "unique_period"})


def _refuse_options(
    label: str, values: Mapping[str, Any], only: frozenset[str], layout: str, hint: str
) -> None:
    """InvalidSpec if ``values`` sets any of ``only``, the options of ``layout`` queues only."""
    names = sorted(set(values) & only)
    if names:
        raise InvalidSpec(
            f"{label}: {', '.join(names)} "
            f"{'is an option' if len(names) == 1 else 'are options'} of {layout} queues only; "
            f"{hint}"
        )


def options_from(
    values: Mapping[str, Any],
    *,
    label: str,
    ring: bool,
    aware_datetimes: bool,
    ring_hint: str,
) -> QueueOptions:
    """QueueOptions from a declaration's option values (Django's inner ``class QueueOptions``,
    SQLAlchemy's ``__queue_options__``), with errors that name the declaration (``label``).

    Every option is optional except ``capacity`` for a ring queue; the ring's options are
    refused on a split queue, with ``ring_hint`` saying how to declare a ring instead, and the
    split queue's options (``keep_done``) on a ring.
    """
    unknown = sorted(set(values) - OPTION_NAMES)
    if unknown:
        raise InvalidSpec(
            f"{label}: unknown option(s) {', '.join(unknown)}; "
            f"known: {', '.join(sorted(OPTION_NAMES))}"
        )
    if not ring:
        _refuse_options(label, values, RING_OPTIONS, "ring", ring_hint)
    else:
        _refuse_options(label, values, SPLIT_OPTIONS, "split", SPLIT_HINT)
        _refuse_options(label, values, UNIQUE_OPTIONS, "split", UNIQUE_HINT)
    if ring and values.get("capacity") is None:
        raise InvalidSpec(
            f"{label}: a ring queue needs capacity = <number of slots>, the most "
            f"messages it holds at once (its table is preallocated with that many rows)"
        )
    backoff = values.get("backoff")
    if backoff is not None and not isinstance(backoff, Backoff):
        raise InvalidSpec(f"{label}.backoff must be a dbqueue.Backoff")
    lease = values.get("lease", DEFAULT_LEASE)
    if not isinstance(lease, timedelta):
        raise InvalidSpec(f"{label}.lease must be a timedelta")
    try:
        return QueueOptions(**values, aware_datetimes=aware_datetimes)
    except InvalidSpec as exc:
        raise InvalidSpec(f"{label}: {exc}") from None


def index_name(table: str, purpose: str) -> str:
    """A short, deterministic index name: Django caps index names at 30 characters, so the
    table name is hashed rather than embedded."""
    digest = hashlib.sha1(table.encode(), usedforsecurity=False).hexdigest()[:10]
    return f"dbq_{digest}_{purpose}"


def check_identifier(name: str, what: str, max_bytes: int = MAX_IDENTIFIER_BYTES) -> str:
    """Return ``name`` if it is a safe identifier, else raise :class:`InvalidSpec`."""
    if not isinstance(name, str) or not IDENTIFIER.fullmatch(name):
        raise InvalidSpec(
            f"{what} {name!r} is not a valid identifier: use lower-case letters, digits and "
            f"underscores, starting with a letter or underscore"
        )
    if len(name.encode()) > max_bytes:
        raise InvalidSpec(
            f"{what} {name!r} is {len(name.encode())} bytes long; at most {max_bytes} are allowed "
            f"so that every derived name fits PostgreSQL's {MAX_IDENTIFIER_BYTES}-byte limit"
        )
    return name


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """A queue: its data table name, payload fields (in column order) and options.

    The meta table is ``<table>_meta``; index names are derived by :meth:`index_name`.
    """

    table: str
    fields: tuple[Field, ...]
    options: QueueOptions = field(default_factory=QueueOptions)
    #: The consumer group whose deliveries this spec's operations serve (one of
    #: ``options.groups``; see :meth:`for_group`), or None: the queue as a whole.
    group: str | None = None

    def __post_init__(self) -> None:
        check_identifier(self.table, "queue table name", MAX_TABLE_NAME)
        room = MAX_IDENTIFIER_BYTES - len(f"{self.table}{GROUP_META_INFIX}".encode())
        for name in self.options.groups:
            check_identifier(name, f"consumer group of queue {self.table!r}", room)
        if self.group is not None and self.group not in self.options.groups:
            raise InvalidSpec(self._unknown_group(self.group))
        seen: set[str] = set()
        for f in self.fields:
            check_identifier(f.name, f"field name of queue {self.table!r}")
            if f.name in RESERVED_NAMES:
                raise InvalidSpec(
                    f"field {f.name!r} of queue {self.table!r} uses a reserved name; reserved: "
                    f"{', '.join(sorted(RESERVED_NAMES))}"
                )
            if f.name in seen:
                raise InvalidSpec(f"field {f.name!r} of queue {self.table!r} is declared twice")
            seen.add(f.name)
            if f.max_length is not None and (
                f.kind is not FieldKind.TEXT
                or not isinstance(f.max_length, int)
                or isinstance(f.max_length, bool)
                or f.max_length < 1
            ):
                raise InvalidSpec(f"max_length applies to text fields only ({f.name!r})")
        unknown = sorted(set(self.options.unique) - seen)
        if unknown:
            raise InvalidSpec(
                f"queue {self.table!r}: unique names {', '.join(map(repr, unknown))}, not a "
                f"payload field; its fields: {', '.join(sorted(seen)) or '(none)'}"
            )

    @property
    def meta_table(self) -> str:
        """The meta table: ``<table>_meta``, or for a consumer group ``<table>_meta_<group>``."""
        if self.group is not None:
            return f"{self.table}{GROUP_META_INFIX}{self.group}"
        return f"{self.table}_meta"

    @property
    def head_table(self) -> str:
        """Split queues: where each priority's ready items begin in the meta table's index
        (:mod:`dbqueue.upkeep.heads`), ``<table>_head``; a consumer group's is
        ``<table>_head_<group>``."""
        if self.group is not None:
            return f"{self.table}{GROUP_HEAD_INFIX}{self.group}"
        return f"{self.table}_head"

    @property
    def group_head_tables(self) -> tuple[str, ...]:
        """The head table of each consumer group, in declaration order (none without groups)."""
        return tuple(self.for_group(g).head_table for g in self.options.groups)

    @property
    def fans_out(self) -> bool:
        """Whether this is a queue with consumer groups as a whole: its pushes go to every
        group, and its deliveries are reached through :meth:`for_group`."""
        return bool(self.options.groups) and self.group is None

    @property
    def group_meta_tables(self) -> tuple[str, ...]:
        """The meta table of each consumer group, in declaration order (none without groups)."""
        return tuple(self.for_group(g).meta_table for g in self.options.groups)

    def for_group(self, name: str) -> QueueSpec:
        """This queue as seen by consumer group ``name``: its operations lease, ack, fail and
        count that group's deliveries only. InvalidArgument for a group not declared."""
        if name not in self.options.groups:
            raise InvalidArgument(self._unknown_group(name))
        return replace(self, group=name)

    def _unknown_group(self, name: object) -> str:
        groups = self.options.groups
        return (
            f"queue {self.table!r} has no consumer group {shown(name)}; its groups: "
            f"{', '.join(groups)}"
            if groups
            else f"queue {self.table!r} has no consumer groups (QueueOptions.groups), so no "
            f"group {shown(name)}"
        )

    @property
    def failed_table(self) -> str:
        """Ring queues: the side table, where messages wait out of the ring (failed ones,
        retries, moved leases, spilled ones); a consumer group's is ``<table>_side_<group>``.
        A ring with groups keeps its own for the messages that spilled before any group got
        them."""
        if self.group is not None:
            return f"{self.table}{GROUP_SIDE_INFIX}{self.group}"
        return f"{self.table}_failed"

    @property
    def state_table(self) -> str:
        """Ring queues: the table of the slots' states, ``<table>`` itself; a consumer group's
        is ``<table>_ring_<group>``, its own row of every slot (dbqueue.ring, "Consumer
        groups")."""
        if self.group is not None:
            return f"{self.table}{GROUP_STATE_INFIX}{self.group}"
        return self.table

    @property
    def group_specs(self) -> tuple[QueueSpec, ...]:
        """This queue as each of its consumer groups sees it, in declaration order."""
        return tuple(self.for_group(g) for g in self.options.groups)

    @property
    def stage_table(self) -> str:
        """Where a Spark write stages its rows before publishing them (dbqueue.spark)."""
        return f"{self.table}_stage"

    def segment_table(self, i: int) -> str:
        """Ring queues of many slots: the table of the ``i``-th segment of the slots (see
        :func:`dbqueue.schema.ring_segment_bounds`)."""
        return f"{self.table}_s{i}"

    @property
    def push_seq(self) -> str:
        """Ring queues: the sequence that numbers pushes."""
        return f"{self.table}_push_seq"

    @property
    def pop_seq(self) -> str:
        """Ring queues: the sequence that numbers pop claims; a consumer group's own is
        ``<table>_pop_<group>``."""
        if self.group is not None:
            return f"{self.table}{GROUP_POP_INFIX}{self.group}"
        return f"{self.table}_pop_seq"

    @property
    def channel(self) -> str:
        """The LISTEN/NOTIFY channel of this queue (at most 62 bytes, like every derived name)."""
        return f"dbqueue_{self.table}"

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def index_name(self, purpose: str) -> str:
        """The name of this queue's ``purpose`` index (see :func:`index_name`); a consumer
        group's indexes are named after its meta table."""
        return index_name(self.table if self.group is None else self.meta_table, purpose)

    @property
    def lock_key(self) -> int:
        """A signed 64-bit advisory-lock key, stable across processes, for this queue (for a
        consumer group: for that group's deliveries)."""
        suffix = "" if self.group is None else f":{self.group}"
        return advisory_key(f"dbqueue:{self.table}{suffix}")


def advisory_key(name: str) -> int:
    """A signed 64-bit advisory-lock key for ``name``, the same in every process (a hash of
    it, not Python's per-process ``hash``)."""
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)
