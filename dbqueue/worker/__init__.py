"""The worker loop every front end shares (Django's ``runqueueworker``, the SQLAlchemy CLI, the
core): pop a batch, run the handler per item or per batch, ack what succeeded and fail what
raised (back-off, then failed after ``max_attempts``), extend leases while a slow batch runs,
rescue the expired leases of dead workers, and sleep until there is work.

Concurrency is by threads, each with its own database connection (``WorkerQueue`` methods run
on the calling thread's connection); run several processes for more. A thread pops only as many
items as it will handle next, so nothing waits leased in a local buffer.

Errors: a handler's exception fails its item (or its batch) with the traceback. A database
error (the server restarting, a dropped connection) drops the thread's connection, waits with
back-off and carries on: the batch in hand is settled once the database is back (acks and
fails are fenced by lease tokens, so a late settle cannot touch a redelivered copy). A
:class:`~dbqueue.errors.DBQueueError` (a missing table, a bad argument) stops the worker and is
raised from :meth:`Worker.run`.

The package by concern: :mod:`~dbqueue.worker.consumer` (what a worker runs: consumers, chores, the
queue protocol, its tallies), :mod:`~dbqueue.worker.loop` (the threads' fetch-handle-settle
loop), :mod:`~dbqueue.worker.handling` (running handlers and settling their items),
:mod:`~dbqueue.worker.maintenance` (rescue, compaction, chores, the worker's heartbeat),
:mod:`~dbqueue.worker.leases` (the thread extending leases and touching the health file),
:mod:`~dbqueue.worker.summary` (the periodic INFO line), :mod:`~dbqueue.worker.heartbeat`
(what the worker reports of itself) and
:mod:`~dbqueue.worker.signals` (SIGTERM and SIGINT, and the one hard exit).
"""

from dbqueue.worker.consumer import Chore, Consumer, WorkerQueue, WorkerStats
from dbqueue.worker.heartbeat import Heartbeat, QueueActivity, WorkerReport
from dbqueue.worker.loop import Worker
from dbqueue.worker.state import BURST_RECONNECT_FOR, REFUSED_ERROR, RETRY_MAX

__all__ = [
    "BURST_RECONNECT_FOR",
    "REFUSED_ERROR",
    "RETRY_MAX",
    "Chore",
    "Consumer",
    "Heartbeat",
    "QueueActivity",
    "Worker",
    "WorkerQueue",
    "WorkerReport",
    "WorkerStats",
]
