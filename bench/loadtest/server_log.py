"""The web's failed requests as one line each in the server's log, and their causes read back.

Django logs a request that raised on the ``django.request`` logger (with ``DEBUG`` off, its
default configuration shows it nowhere); :class:`ErrorLine` formats such a record as
``loadtest-error status=500 exception=dbqueue.errors.QueueFull``, which :func:`causes` counts.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from pathlib import Path
from typing import Any

PREFIX = "loadtest-error"
LINE = re.compile(rf"{PREFIX} status=(?P<status>\d+) exception=(?P<exception>\S+)")
#: gunicorn's own complaints that end a request without a response from Django.
GUNICORN = {
    "WORKER TIMEOUT": "gunicorn: worker timeout",
    "was sent SIGKILL": "gunicorn: worker killed",
}


class ErrorLine(logging.Formatter):
    """``loadtest-error status=<code> exception=<module.Class>`` (``-`` without one)."""

    def format(self, record: logging.LogRecord) -> str:
        status = getattr(record, "status_code", None) or 500
        exc = record.exc_info[0] if record.exc_info else None
        name = f"{exc.__module__}.{exc.__qualname__}" if exc is not None else "-"
        return f"{PREFIX} status={status} exception={name}"


def causes(log: Path) -> Counter[str]:
    """``"<status> <exception>"`` -> count, from a server log (gunicorn's own errors too)."""
    found: Counter[str] = Counter()
    if not log.exists():
        return found
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        match = LINE.search(line)
        if match:
            found[f"{match['status']} {match['exception']}"] += 1
            continue
        for needle, cause in GUNICORN.items():
            if needle in line:
                found[cause] += 1
    return found


def logging_config(base: dict[str, Any] | None) -> dict[str, Any]:
    """``base`` (the site's ``LOGGING``, if any) with the error lines added on stderr."""
    config = dict(base or {"version": 1, "disable_existing_loggers": False})
    formatters = dict(config.get("formatters") or {})
    handlers = dict(config.get("handlers") or {})
    loggers = dict(config.get("loggers") or {})
    formatters["loadtest"] = {"()": f"{__name__}.ErrorLine"}
    handlers["loadtest"] = {
        "class": "logging.StreamHandler",
        "formatter": "loadtest",
        "level": "ERROR",
    }
    loggers["django.request"] = {"handlers": ["loadtest"], "level": "ERROR", "propagate": False}
    config.update(formatters=formatters, handlers=handlers, loggers=loggers)
    return config
