"""The driver keeps the leases of its batches in flight alive (dbqueue.spark.leases)."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
from pyspark.sql import DataFrame, SparkSession

from dbqueue import QueueSpec, SplitQueue
from dbqueue.drivers import executor_for
from dbqueue.spark.leases import LeaseKeeper
from tests.spark.conftest import SPARK
from tests.spark.streams import DIALECT, counts, delivered, push, run_query, stream, to_parquet

pytestmark = SPARK

LEASE = dt.timedelta(seconds=1)


def rescued(dsn: str, spec: QueueSpec) -> int:
    """What a worker's rescue on another connection gives back now."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        result = SplitQueue(spec, DIALECT).rescue(executor_for(DIALECT, conn))
        return result.ready + result.failed


def test_a_keeper_extends_its_batches_until_dropped_or_stopped(
    spark_dsn: str, spark_conn: psycopg.Connection[Any], split: QueueSpec
) -> None:
    core = SplitQueue(split, DIALECT)
    push(spark_conn, split, range(30))
    ex = executor_for(DIALECT, spark_conn)
    tokens = [(m.id, m.attempts) for m in core.pop_batch(ex, 30, lease=LEASE)]
    keeper = LeaseKeeper(spark_dsn, lambda: core, LEASE)
    keeper.hold(1, tokens[:10])
    keeper.hold(2, tokens[10:20])
    keeper.hold(3, tokens[20:])
    try:
        time.sleep(2.5 * LEASE.total_seconds())
        assert rescued(spark_dsn, split) == 0  # every lease alive, well past its first end
        assert keeper.held() == 30 and keeper.extended >= 30
        keeper.drop(2)  # batches 1 and 2 acknowledged: no longer extended
        time.sleep(2 * LEASE.total_seconds())
        assert rescued(spark_dsn, split) == 20
        assert keeper.held() == 10
    finally:
        keeper.stop()
    # Stopped: batch 3 keeps its lease until it runs out, then a rescue gives it back.
    time.sleep(2 * LEASE.total_seconds())
    assert rescued(spark_dsn, split) == 10
    assert keeper.lost == 0


def test_an_extension_meeting_an_acknowledgement_waits_and_loses_nothing(
    spark_dsn: str, spark_conn: psycopg.Connection[Any], split: QueueSpec
) -> None:
    """An extension that begins while the stream acknowledges a batch waits for it, then
    extends only what is still in flight: the acknowledged batch is neither extended nor
    counted lost (read before the wait, it was both, and the stream warned of lost leases)."""
    core = SplitQueue(split, DIALECT)
    push(spark_conn, split, range(10))
    ex = executor_for(DIALECT, spark_conn)
    tokens = [(m.id, m.attempts) for m in core.pop_batch(ex, 10, lease=LEASE)]
    keeper = LeaseKeeper(spark_dsn, lambda: core, LEASE)
    keeper.hold(1, tokens)
    keeper.stop()  # its thread ends before its first beat: this test extends by hand
    with psycopg.connect(spark_dsn, autocommit=True) as other:
        started = threading.Event()

        def extend() -> None:
            started.set()
            keeper.extend_now(other)

        extension = threading.Thread(target=extend)
        with keeper.settling(1):
            extension.start()
            started.wait()
            time.sleep(0.2)  # (the extension is at its lock by now, not that it matters)
            assert sorted(core.ack(ex, tokens)) == [t[0] for t in tokens]
        extension.join()
    assert (keeper.extended, keeper.lost, keeper.held()) == (0, 0, 0)


def test_a_batch_slower_than_its_lease_keeps_its_items(
    spark: SparkSession,
    spark_dsn: str,
    spark_conn: psycopg.Connection[Any],
    split: QueueSpec,
    checkpoint: str,
    tmp_path: Path,
) -> None:
    """Each batch takes three leases long, and a worker's rescue runs meanwhile: it finds
    nothing expired, and every item reaches the sink once."""
    push(spark_conn, split, range(900))
    out = tmp_path / "out"
    write = to_parquet(out)
    found: list[int] = []

    def slow(batch: DataFrame, batch_id: int) -> None:
        time.sleep(3 * LEASE.total_seconds())
        found.append(rescued(spark_dsn, split))
        write(batch, batch_id)

    df = stream(spark, spark_dsn, split.table, maxMessagesPerBatch="300", leaseSeconds="1")
    query = run_query(df, checkpoint, slow, "availableNow")
    assert found == [0, 0, 0]
    assert sorted(n for _, n in delivered(spark, out)) == list(range(900))
    assert counts(spark_conn, split) == {}
    last = json.loads(query.recentProgress[-1]["sources"][0]["latestOffset"])
    assert last["leasesExtended"] > 0 and last["leasesLost"] == 0
