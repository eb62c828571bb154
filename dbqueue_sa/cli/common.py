"""What every ``dbqueue`` subcommand shares: exit codes, errors, the database URL, logging and
the application's modules."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from dbqueue.commandline import log_to_stderr
from dbqueue.errors import InvalidArgument, UnsupportedDatabase
from dbqueue_sa.discovery import FoundQueue, discover
from dbqueue_sa.worker import database_url

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
#: Items retried or purged per transaction: short enough not to hold locks for long.
DEFAULT_BATCH = 1000
URL_ENV = "DBQUEUE_URL"
MISSING_HINT = (
    "apply the migrations (SQLAlchemy: metadata.create_all() or alembic upgrade; Django: "
    "manage.py migrate)"
)


class CommandError(Exception):
    """A command that cannot run: the message is printed, ``code`` is the exit status."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Subcommand:
    """One ``dbqueue <name>`` subcommand."""

    name: str
    help: str
    description: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# -- shared pieces ------------------------------------------------------------------------------


def configure_logging(verbosity: int) -> None:
    """dbqueue's logs on stderr: warnings (0), each batch (1), debugging (2 and more)."""
    log_to_stderr({0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG))


def import_modules(names: Sequence[str], verbosity: int) -> None:
    """Import the application's modules (models, handlers), from the current directory too,
    as ``python -m`` would."""
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:
            if verbosity >= 2:
                traceback.print_exc()
            raise CommandError(
                f"cannot import module {name!r}: {type(exc).__name__}: {exc}"
            ) from exc


def url_of(args: argparse.Namespace) -> sa.URL:
    if not args.url:
        raise CommandError(f"no database: pass --url URL or set {URL_ENV}")
    try:
        return database_url(args.url)
    except (InvalidArgument, UnsupportedDatabase) as exc:
        raise CommandError(str(exc)) from None


def engine_for(url: sa.URL) -> sa.Engine:
    # One connection for the whole command: no pool to keep.
    return sa.create_engine(url, poolclass=sa.NullPool)


def find_queue(connection: sa.Connection, name: str) -> FoundQueue:
    queues = discover(connection)
    for queue in queues:
        if queue.name == name:
            return queue
    known = ", ".join(q.name for q in queues) or "none"
    raise CommandError(f"no queue {name!r} in this database (queues found: {known})")
