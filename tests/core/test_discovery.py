"""dbqueue.discovery: which tables are queues, the rule the Spark source and the SQLAlchemy
command line share (each runs it on its own catalog reads: tests/spark/test_catalog.py,
tests/sqlalchemy/test_discovery.py)."""

from __future__ import annotations

import pytest

from dbqueue import QueueOptions, QueueSpec
from dbqueue.discovery import (
    RING,
    SPLIT,
    FoundQueue,
    candidates,
    groups_of,
    layout_of,
    related_tables,
)
from dbqueue.errors import InvalidSpec
from dbqueue.schema import (
    FAILED_BASE_COLUMNS,
    GROUP_META_COLUMNS,
    META_COLUMNS,
    RING_BASE_COLUMNS,
    SPLIT_BASE_COLUMNS,
)

SPLIT_TABLES = {"jobs": [*SPLIT_BASE_COLUMNS, "to"], "jobs_meta": list(META_COLUMNS)}
RING_TABLES = {"ticks": [*RING_BASE_COLUMNS, "price"], "ticks_failed": list(FAILED_BASE_COLUMNS)}


def test_a_split_queue_and_a_ring_are_told_apart_by_the_tables_beside_them() -> None:
    columns = {**SPLIT_TABLES, **RING_TABLES, "users": ["id", "name"]}
    assert candidates(columns) == ["jobs", "ticks"]
    assert [layout_of(t, columns) for t in ("jobs", "ticks", "users")] == [SPLIT, RING, None]


def test_tables_with_the_names_but_not_the_columns_are_not_queues() -> None:
    assert layout_of("jobs", {"jobs": ["id"], "jobs_meta": list(META_COLUMNS)}) is None
    assert layout_of("jobs", {**SPLIT_TABLES, "jobs_meta": ["id", "state"]}) is None
    assert layout_of("ticks", {"ticks": ["id"], "ticks_failed": list(FAILED_BASE_COLUMNS)}) is None
    assert layout_of("jobs", {"jobs": list(SPLIT_BASE_COLUMNS)}) is None  # no meta table


def test_a_split_queue_beside_a_table_named_like_a_side_table_stays_split() -> None:
    columns = {**SPLIT_TABLES, "jobs_failed": list(FAILED_BASE_COLUMNS)}
    assert layout_of("jobs", columns) == SPLIT


def test_a_name_no_queue_can_have_is_refused() -> None:
    with pytest.raises(InvalidSpec):
        layout_of("no such; table", {})


def test_a_found_queue_says_its_layout() -> None:
    assert FoundQueue(QueueSpec("jobs", ())).layout == SPLIT
    ring = FoundQueue(QueueSpec("ticks", (), QueueOptions(capacity=8)))
    assert (ring.name, ring.ring, ring.layout) == ("ticks", True, RING)


def test_a_queue_with_consumer_groups_is_found_by_its_groups_tables() -> None:
    columns = {
        "orders": [*SPLIT_BASE_COLUMNS, "n"],
        "orders_meta_search": list(GROUP_META_COLUMNS),
        "orders_meta_email": list(GROUP_META_COLUMNS),
        "orders_meta_Bad": list(GROUP_META_COLUMNS),  # no group has that name
        "orders_meta_old": list(META_COLUMNS),  # no last_error: not a group's table
        **SPLIT_TABLES,
    }
    assert candidates(columns) == ["jobs", "orders"]
    assert layout_of("orders", columns) == SPLIT
    assert groups_of("orders", columns) == ("email", "search")
    assert groups_of("jobs", columns) == ()
    assert related_tables("orders", [*columns, "ordersx"]) == [
        "orders", "orders_meta_Bad", "orders_meta_email", "orders_meta_old", "orders_meta_search"
    ]  # fmt: skip
    # Group tables without the data table are not a queue.
    del columns["orders"]
    assert layout_of("orders", columns) is None


def test_a_ring_with_consumer_groups_is_found_with_its_groups() -> None:
    columns = {
        **RING_TABLES,
        "ticks_ring_email": list(RING_BASE_COLUMNS),
        "ticks_side_email": list(FAILED_BASE_COLUMNS),
        "ticks_ring_audit": list(RING_BASE_COLUMNS),
        "ticks_side_audit": list(FAILED_BASE_COLUMNS),
        "ticks_ring_lonely": list(RING_BASE_COLUMNS),  # no side table: not a group's
    }
    assert candidates(columns) == ["ticks"]
    assert layout_of("ticks", columns) == RING
    assert groups_of("ticks", columns) == ("audit", "email")
    assert related_tables("ticks", [*columns, "ticksx"]) == [
        "ticks", "ticks_failed", "ticks_ring_audit", "ticks_ring_email", "ticks_ring_lonely",
        "ticks_side_audit", "ticks_side_email",
    ]  # fmt: skip


#: A head table's columns (dbqueue.schema.head_statement).
HEAD_COLUMNS = ["priority", "run_at"]


def test_head_tables_are_no_queues_and_change_nothing() -> None:
    """A split queue's head table (``<table>_head``, a group's ``<table>_head_<group>``) is
    neither a queue nor a consumer group, and a queue is found the same beside it."""
    columns = {
        **SPLIT_TABLES,
        "jobs_head": HEAD_COLUMNS,
        "orders": [*SPLIT_BASE_COLUMNS, "n"],
        "orders_meta_email": list(GROUP_META_COLUMNS),
        "orders_head_email": HEAD_COLUMNS,
    }
    assert candidates(columns) == ["jobs", "orders"]
    assert [layout_of(t, columns) for t in columns] == [SPLIT, None, None, SPLIT, None, None]
    assert groups_of("orders", columns) == ("email",)
    assert groups_of("jobs", columns) == ()
    assert "orders_head_email" not in related_tables("orders", columns)
    # A queue whose groups' meta tables are gone is not found by its head tables.
    del columns["orders_meta_email"]
    assert layout_of("orders", columns) is None
