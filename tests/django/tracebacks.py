"""Tracebacks as a worker stores them (``traceback.format_exc``), for the tests of what the
admin reads out of them."""

from __future__ import annotations

import traceback


def stored(exc: BaseException) -> str:
    """The traceback of ``exc`` raised and caught here."""
    try:
        raise exc
    except BaseException:
        return traceback.format_exc()


def chained(cause: BaseException, exc: BaseException, *, explicit: bool = True) -> str:
    """The traceback of ``exc`` raised while handling ``cause``: ``raise exc from cause``,
    or (``explicit=False``) with ``cause`` as its implicit context."""
    try:
        try:
            raise cause
        except BaseException:
            if explicit:
                raise exc from cause
            raise exc  # noqa: B904 - the implicit context is the point
    except BaseException:
        return traceback.format_exc()
