"""``manage.py archivequeue``: queue models resolved to their tables, the database from
Django's settings, the same archive job as ``dbqueue archive`` (dbqueue.spark.archive)."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from tests.django.testapp.models import Ping, Tick

pytestmark = [
    pytest.mark.django,
    pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
]


def archivequeue(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("archivequeue", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.mark.postgresql
@pytest.mark.spark
@pytest.mark.xdist_group("spark")
def test_archivequeue_moves_old_finished_items(tmp_path: Path) -> None:
    ids = Ping.queue.push_many([{"message": f"m{i}"} for i in range(9)])
    old, recent = ids[:6], ids[6:]
    meta = f"{Ping._meta.db_table}_meta"
    with connection.cursor() as cursor:  # done at that time, as a keep_done ack leaves them
        cursor.execute(
            f"UPDATE {meta} SET state = 2, run_at = '2025-06-01T12:00:00+00' WHERE id = ANY(%s)",
            [old],
        )
    folder = tmp_path / "archive"
    out, _ = archivequeue(
        "testapp.Ping", "testapp.Tick", "--older-than", "30d", "--to", str(folder),
        "--master", "local[1]", "--batch-size", "4", "--verbosity", "0",
    )  # fmt: skip
    ping, tick = out.splitlines()
    assert ping.startswith(f"{Ping._meta.db_table}: archived ") and "6 item(s)" in ping
    assert tick.startswith(f"{Tick._meta.db_table}: nothing to archive")
    rows = pq.read_table(folder, partitioning="hive").to_pylist()
    assert sorted(r["id"] for r in rows) == old
    assert {(r["queue"], r["day"], r["state"]) for r in rows} == {
        (Ping._meta.db_table, "2025-06-01", "done")
    }
    assert sorted(r["message"] for r in rows) == [f"m{i}" for i in range(6)]
    assert sorted(Ping.objects.values_list("id", flat=True)) == recent


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope.Model"], "'nope.Model' is not an installed model"),
        (["auth.User"], "'auth.User' is not a queue model"),
        (["testapp.Ping", "--database", "sqlite"], "database 'sqlite' is SQLite: the archive "),
        (["testapp.Ping", "--database", "nope"], "no database alias 'nope'"),
    ],
)
def test_what_archivequeue_refuses(args: list[str], message: str, tmp_path: Path) -> None:
    folder = tmp_path / "archive"
    with pytest.raises(CommandError, match=message):
        archivequeue(*args, "--older-than", "7d", "--to", str(folder))
    assert not folder.exists()


@pytest.mark.postgresql
def test_a_queue_model_without_its_tables_is_refused(tmp_path: Path) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {Ping._meta.db_table} RENAME TO hidden_ping")
    try:
        with pytest.raises(CommandError, match="no queue table 'testapp_ping'"):
            archivequeue("testapp.Ping", "--older-than", "7d", "--to", str(tmp_path / "a"))
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE hidden_ping RENAME TO {Ping._meta.db_table}")


def test_a_bad_duration_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="'7x' is not a duration"):
        archivequeue("testapp.Ping", "--older-than", "7x", "--to", str(tmp_path))
