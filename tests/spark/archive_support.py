"""Helpers of the archive tests: a split queue with finished items on several old days and
items that must stay, and what the archive folder and the database hold afterwards."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pyarrow.parquet as pq

from dbqueue import Field, FieldKind, QueueSpec, SplitQueue, get_dialect
from dbqueue.drivers import executor_for
from dbqueue.spark.archive_log import LOG_DIR

DIALECT = get_dialect("postgresql")
FIELDS = (Field("n", FieldKind.BIGINT), Field("body", FieldKind.TEXT, nullable=True))
UTC = dt.UTC
#: When the old items finished: two days of done items (one at the last instant of its UTC
#: day) and a day of failed ones, all far older than any cut-off the tests use.
OLD_DONE = {
    dt.datetime(2025, 3, 1, 8, tzinfo=UTC): 12,
    dt.datetime(2025, 3, 2, 23, 59, 59, 999_000, tzinfo=UTC): 10,
}
OLD_FAILED = {dt.datetime(2025, 3, 3, 0, 0, tzinfo=UTC): 8}
OLD_DAYS = ("2025-03-01", "2025-03-02", "2025-03-03")
OLD_COUNT = sum(OLD_DONE.values()) + sum(OLD_FAILED.values())
#: Seven days: what the tests archive with.
WEEK = dt.timedelta(days=7)


@dataclass(frozen=True)
class Scenario:
    """The queue's items: ``old`` are archivable with a week's cut-off, ``kept`` are not
    (done and failed an hour ago, ready, leased), with their state."""

    spec: QueueSpec
    old: dict[int, dt.datetime]
    kept: dict[int, int]

    @property
    def table(self) -> str:
        return self.spec.table


def push(conn: psycopg.Connection[Any], spec: QueueSpec, count: int, first: int = 0) -> list[int]:
    ex = executor_for(DIALECT, conn)
    payloads = [{"n": first + i, "body": f"b{first + i}"} for i in range(count)]
    return list(SplitQueue(spec, DIALECT).push_many(ex, payloads))


def finish(
    conn: psycopg.Connection[Any], spec: QueueSpec, ids: list[int], state: int, at: Any
) -> None:
    """Mark items done (2) or failed (3) at ``at``, as an ack with keep_done or a last failure
    does (``at`` may be SQL text, e.g. ``now() - interval '1 hour'``)."""
    when = at if isinstance(at, str) else "%(at)s"
    conn.execute(
        f'UPDATE "{spec.meta_table}" SET state = %(state)s, run_at = {when}, lease_until = NULL '
        f"WHERE id = ANY(%(ids)s)",
        {"state": state, "at": at, "ids": ids},
    )


def build_scenario(conn: psycopg.Connection[Any], spec: QueueSpec) -> Scenario:
    old: dict[int, dt.datetime] = {}
    for state, days in ((2, OLD_DONE), (3, OLD_FAILED)):
        for at, count in days.items():
            ids = push(conn, spec, count, first=len(old))
            finish(conn, spec, ids, state, at)
            old.update(dict.fromkeys(ids, at))
    recent_done, recent_failed = push(conn, spec, 4, 100), push(conn, spec, 3, 200)
    finish(conn, spec, recent_done, 2, "now() - interval '1 hour'")
    finish(conn, spec, recent_failed, 3, "now() - interval '6 days'")
    ready, leased = push(conn, spec, 5, 300), push(conn, spec, 3, 400)
    conn.execute(f'UPDATE "{spec.meta_table}" SET state = 1 WHERE id = ANY(%s)', [leased])
    kept = {
        **dict.fromkeys(recent_done, 2),
        **dict.fromkeys(recent_failed, 3),
        **dict.fromkeys(ready, 0),
        **dict.fromkeys(leased, 1),
    }
    return Scenario(spec, old, kept)


def database_items(conn: psycopg.Connection[Any], spec: QueueSpec) -> dict[int, int]:
    """id -> state of every item, checking each meta row has its data row and no more."""
    meta = dict(conn.execute(f'SELECT id, state FROM "{spec.meta_table}"').fetchall())
    data = {row[0] for row in conn.execute(f'SELECT id FROM "{spec.table}"')}
    assert data == set(meta), "meta and data rows differ"
    return meta


def archive_rows(path: Path) -> list[dict[str, Any]]:
    """Every row a Parquet reader sees in the archive folder (Arrow's reader: it skips the
    underscore folders as Spark's does), with the partition columns from the folder names."""
    if not any(p.name.startswith("queue=") for p in path.glob("*")):
        return []
    return pq.read_table(path, partitioning="hive").to_pylist()  # type: ignore[no-any-return]


def archived_ids(path: Path) -> list[int]:
    """The ids in the archive, sorted, duplicates kept."""
    return sorted(row["id"] for row in archive_rows(path))


def log_stages(path: Path, table: str) -> list[str]:
    """The run log's record files of ``table``: ``<run>.<n>-<stage>.json`` names, sorted."""
    folder = path / LOG_DIR / table
    return sorted(p.name for p in folder.glob("*.json")) if folder.exists() else []


def staging_files(path: Path) -> list[Path]:
    return list((path / "_dbqueue_staging").rglob("*.parquet"))
