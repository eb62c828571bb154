"""Structural checks on the planner's choices (EXPLAIN, never a timer): an executor that
records every relation the plans of the statements it runs scan sequentially."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any

from dbqueue.executor import Executor, Row


class ExplainingExecutor:
    """Runs every statement after recording the relations its plan scans sequentially and
    the indexes it scans."""

    def __init__(self, inner: Executor) -> None:
        self.inner = inner
        self.dialect = inner.dialect
        self.scans: list[tuple[str, str]] = []  # (relation, first line of the statement)
        self.indexes: list[tuple[str, str]] = []  # (index, first line of the statement)

    def execute(self, sql: str, params: Mapping[str, Any]) -> list[Row]:
        if sql.lstrip().upper().startswith(("WITH", "SELECT", "UPDATE", "INSERT", "DELETE")):
            plan = self.inner.execute("EXPLAIN (FORMAT JSON) " + sql, params)[0][0]
            plan = json.loads(plan) if isinstance(plan, str) else plan
            first_line = sql.strip().splitlines()[0]
            for relation in seq_scans(plan[0]["Plan"]):
                self.scans.append((relation, first_line))
            for index in index_scans(plan[0]["Plan"]):
                self.indexes.append((index, first_line))
        return self.inner.execute(sql, params)

    def in_transaction(self) -> bool:
        return self.inner.in_transaction()

    def atomic(self) -> AbstractContextManager[object]:
        return self.inner.atomic()


def seq_scans(node: dict[str, Any]) -> Iterator[str]:
    if node.get("Node Type") == "Seq Scan":
        yield node["Relation Name"]
    for child in node.get("Plans", ()):
        yield from seq_scans(child)


def index_scans(node: dict[str, Any]) -> Iterator[str]:
    if "Index Name" in node:
        yield node["Index Name"]
    for child in node.get("Plans", ()):
        yield from index_scans(child)


class _RolledBack(Exception):
    pass


class WorkCountingExecutor(ExplainingExecutor):
    """Runs every statement after running it once under EXPLAIN ANALYZE in a transaction it
    rolls back, and records the most rows any node of its plan handled (the rows it returned
    and those its filters removed, over all its loops): a count of work, not a time."""

    def __init__(self, inner: Executor) -> None:
        super().__init__(inner)
        self.work: list[tuple[int, str]] = []  # (rows, first line of the statement)

    def execute(self, sql: str, params: Mapping[str, Any]) -> list[Row]:
        if sql.lstrip().upper().startswith(("WITH", "SELECT", "UPDATE", "INSERT", "DELETE")):
            try:
                with self.inner.atomic():
                    plan = self.inner.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
                    raise _RolledBack(plan[0][0])
            except _RolledBack as done:
                found = done.args[0]
            found = json.loads(found) if isinstance(found, str) else found
            self.work.append((max(node_work(found[0]["Plan"])), sql.strip().splitlines()[0]))
        return self.inner.execute(sql, params)


def node_work(node: dict[str, Any]) -> Iterator[int]:
    """The rows each node of an analysed plan handled over all its loops."""
    loops = node.get("Actual Loops", 1)
    per_loop = (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
                + node.get("Rows Removed by Join Filter", 0))  # fmt: skip
    yield int(per_loop * loops)
    for child in node.get("Plans", ()):
        yield from node_work(child)
