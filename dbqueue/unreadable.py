"""Hearing how many unreadable messages a pop failed for good.

A leasing pop that takes a message it cannot read (a payload written outside dbqueue that the
codec cannot decode) fails it for good at once (:meth:`dbqueue.layout.Layout._read_each`):
its caller never sees it, so a caller that counts what failed (the worker's summaries and
metrics) would not count it. Such a caller runs its pops inside :func:`counting_failed`; the
pop adds to the count (:func:`failed_for_good`). The count is a context variable: it hears the
pops of the calling thread only, inside the block only, and the core knows nothing of who
counts. Chosen over a return value, which would change the signature of every pop of both
layouts and of every front for one caller.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

__all__ = ["FailedUnreadable", "counting_failed", "failed_for_good"]


@dataclass(slots=True)
class FailedUnreadable:
    """How many unreadable messages the pops inside :func:`counting_failed` failed for
    good."""

    count: int = 0


_counted: ContextVar[FailedUnreadable | None] = ContextVar(
    "dbqueue_failed_unreadable", default=None
)


@contextmanager
def counting_failed() -> Iterator[FailedUnreadable]:
    """Count, in what it yields, the unreadable messages the pops of this thread inside the
    block fail for good."""
    counted = FailedUnreadable()
    token = _counted.set(counted)
    try:
        yield counted
    finally:
        _counted.reset(token)


def failed_for_good(n: int) -> None:
    """What a pop calls when it has failed ``n`` unreadable messages for good."""
    counted = _counted.get()
    if counted is not None:
        counted.count += n
