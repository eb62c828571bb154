"""Which tables are queues, told from the database alone: for the Spark source, which knows a
queue by its table name, and the SQLAlchemy command line, which may run where no class
declares it.

A table ``T`` is a split queue when ``T_meta`` exists beside it with the meta columns (and
``T`` has the data table's), or, for a queue with consumer groups, when ``T_meta_<group>``
tables exist beside it with a group's meta columns; and a ring when ``T`` has the slot columns
and ``T_failed`` exists beside it with the side table's (with consumer groups, each group's
``T_ring_<group>`` with the slot columns and ``T_side_<group>`` with the side table's). Anything
else in the database is left alone.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from dbqueue.schema import (
    FAILED_BASE_COLUMNS,
    GROUP_META_COLUMNS,
    META_COLUMNS,
    RING_BASE_COLUMNS,
    SPLIT_BASE_COLUMNS,
)
from dbqueue.spec import (
    GROUP_META_INFIX,
    GROUP_SIDE_INFIX,
    GROUP_STATE_INFIX,
    IDENTIFIER,
    QueueSpec,
)

SPLIT, RING = "split", "ring"


@dataclass(frozen=True, slots=True)
class FoundQueue:
    """A queue found in the database: its spec (a ring's carries its capacity)."""

    spec: QueueSpec

    @property
    def name(self) -> str:
        return self.spec.table

    @property
    def ring(self) -> bool:
        """True for a ring queue, False for a split queue."""
        return self.spec.options.capacity is not None

    @property
    def layout(self) -> str:
        """``"split"`` or ``"ring"``."""
        return RING if self.ring else SPLIT


def layout_of(table: str, columns: Mapping[str, Collection[str]]) -> str | None:
    """The layout of the queue whose table is ``table`` (``"split"``, ``"ring"``), or None if
    it is not a queue's; ``columns``: the column names of the tables around it, by table name
    (a table that does not exist is absent). Raises InvalidSpec for a name no queue has."""
    bare = QueueSpec(table, ())

    def has(name: str, wanted: frozenset[str]) -> bool:
        return name in columns and wanted <= set(columns[name])

    if has(bare.meta_table, META_COLUMNS) and has(table, SPLIT_BASE_COLUMNS):
        return SPLIT
    if groups_of(table, columns) and has(table, SPLIT_BASE_COLUMNS):
        return SPLIT
    if has(bare.failed_table, FAILED_BASE_COLUMNS) and has(table, RING_BASE_COLUMNS):
        return RING
    return None


def groups_of(table: str, columns: Mapping[str, Collection[str]]) -> tuple[str, ...]:
    """The consumer groups of the queue whose table is ``table``: the ``<group>`` of each
    ``<table>_meta_<group>`` among ``columns``' tables that has a group's meta columns (a split
    queue's), or of each ``<table>_ring_<group>`` with the slot columns whose
    ``<table>_side_<group>`` has the side table's (a ring's), sorted (the database does not
    keep the declaration's order)."""

    def named(infix: str, wanted: frozenset[str]) -> set[str]:
        prefix = f"{table}{infix}"
        return {
            name[len(prefix) :]
            for name, cols in columns.items()
            if name.startswith(prefix)
            and IDENTIFIER.fullmatch(name[len(prefix) :])
            and set(cols) >= wanted
        }

    ring = named(GROUP_STATE_INFIX, RING_BASE_COLUMNS) & named(
        GROUP_SIDE_INFIX, FAILED_BASE_COLUMNS
    )
    return tuple(sorted(named(GROUP_META_INFIX, GROUP_META_COLUMNS) | ring))


def candidates(names: Collection[str]) -> list[str]:
    """The tables among ``names`` that may be queues (a ``_meta``, ``_meta_<group>`` or
    ``_failed`` table beside them), by name: what :func:`layout_of` then decides on."""
    present = set(names)
    grouped = {
        t for t in present for n in present if n.startswith(f"{t}{GROUP_META_INFIX}")
    }  # fmt: skip
    return sorted(
        t for t in present if f"{t}_meta" in present or f"{t}_failed" in present or t in grouped
    )


def related_tables(table: str, names: Collection[str]) -> list[str]:
    """The tables among ``names`` that :func:`layout_of` looks at for ``table``: the table, its
    meta, side and consumer groups' tables."""
    prefixes = tuple(f"{table}{i}" for i in (GROUP_META_INFIX, GROUP_STATE_INFIX, GROUP_SIDE_INFIX))
    return sorted(
        n
        for n in names
        if n in (table, f"{table}_meta", f"{table}_failed") or n.startswith(prefixes)
    )
