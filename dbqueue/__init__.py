"""dbqueue: a fast, crash-safe message queue in the application's own relational database.

The core imports no framework. Declare a :class:`QueueSpec`, pick a dialect, and run
:class:`SplitQueue` operations through an executor over your connection::

    spec = QueueSpec("emails", (Field("to", FieldKind.TEXT, max_length=254),))
    queue = SplitQueue(spec, get_dialect("postgresql"))
    queue.push(PsycopgExecutor(conn), {"to": "a@b.c"})
"""

from dbqueue.backoff import Backoff
from dbqueue.dialects import Dialect, get_dialect
from dbqueue.errors import (
    DBQueueError,
    InvalidArgument,
    InvalidPayload,
    InvalidSpec,
    NotLeased,
    PayloadTooLarge,
    QueueFull,
    QueueTableMissing,
    QueueUnavailable,
    RingCapacityMismatch,
    RingNotEmpty,
    SnapshotTooOld,
    TransactionStateError,
    UniqueKeyConflict,
    UnsupportedDatabase,
    UnsupportedOperation,
    WorkerGaveUp,
)
from dbqueue.executor import Executor
from dbqueue.message import (
    CancelOutcome,
    DeliveryMode,
    Message,
    QueueStats,
    RescueResult,
    State,
    StateSelector,
)
from dbqueue.ring import RingQueue
from dbqueue.spec import Field, FieldKind, QueueOptions, QueueSpec, WhenFull
from dbqueue.split import SplitQueue
from dbqueue.unique import Pushed, UniqueScope
from dbqueue.upkeep.compaction import CompactResult

__version__ = "0.1.0.dev0"

__all__ = [
    "Backoff",
    "CancelOutcome",
    "CompactResult",
    "DBQueueError",
    "DeliveryMode",
    "Dialect",
    "Executor",
    "Field",
    "FieldKind",
    "InvalidArgument",
    "InvalidPayload",
    "InvalidSpec",
    "Message",
    "NotLeased",
    "PayloadTooLarge",
    "Pushed",
    "QueueFull",
    "QueueOptions",
    "QueueSpec",
    "QueueStats",
    "QueueTableMissing",
    "QueueUnavailable",
    "RescueResult",
    "RingCapacityMismatch",
    "RingNotEmpty",
    "RingQueue",
    "SnapshotTooOld",
    "SplitQueue",
    "State",
    "StateSelector",
    "TransactionStateError",
    "UniqueKeyConflict",
    "UniqueScope",
    "UnsupportedDatabase",
    "UnsupportedOperation",
    "WhenFull",
    "WorkerGaveUp",
    "get_dialect",
]
