"""A database router that sends every model to one alias: the admin tests run the same pages
on PostgreSQL and SQLite by routing the whole project (users, sessions, queues) to one."""

from __future__ import annotations

from typing import Any


class OneDatabase:
    """Reads, writes and migrations of every model on ``alias``."""

    def __init__(self, alias: str) -> None:
        self.alias = alias

    def db_for_read(self, model: Any, **hints: Any) -> str:
        return self.alias

    def db_for_write(self, model: Any, **hints: Any) -> str:
        return self.alias

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool:
        return True
