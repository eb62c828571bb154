"""``manage.py demospark`` (``make demo-spark``) end to end on a small scale: a real
PostgreSQL, a real local Spark, the real ``runqueueworker`` process.

The command runs in a process of its own, as ``make demo-spark`` runs it: the example shop's
Django settings cannot share this process with the test suite's. So it starts a JVM of its own
(the suite's Spark session, if this process has one, stays idle meanwhile); the ``spark``
xdist group keeps it from running beside the other Spark tests on the machine's two cores.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from matplotlib import image

from tests.example.conftest import manage
from tests.spark.conftest import SPARK

pytestmark = [*SPARK, pytest.mark.slow]

PER_MINUTE = re.compile(
    r"^  \d{4}-\d\d-\d\d \d\d:\d\d +([\d,]+) +(\d+\.\d\d) s +(\d+\.\d\d) s$", re.MULTILINE
)
LATENCY = re.compile(r"^queue latency +\| p50 (\d+\.\d\d) s, p99 (\d+\.\d\d) s", re.MULTILINE)


def _demo_spark(database: str, out: Path, rows: int) -> str:
    result = manage(
        database, "demospark", "--rows", str(rows), "--out", str(out), "--master", "local[2]"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Demo passed." in result.stdout
    return result.stdout


@pytest.mark.soak  # a million page views twice, about two minutes: make test-soak
def test_demo_spark_twice(demo_pg_url: str, tmp_path: Path) -> None:
    # The second run starts afresh: only its own rows are archived, charted and counted.
    for rows in (2_000, 1_500):
        stdout = _demo_spark(demo_pg_url, tmp_path, rows)

        per_minute = PER_MINUTE.findall(stdout)
        assert per_minute, stdout
        assert sum(int(n.replace(",", "")) for n, _, _ in per_minute) == rows
        assert all(float(p50) <= float(p99) for _, p50, p99 in per_minute)
        latency = LATENCY.search(stdout)
        assert latency, stdout
        assert 0 <= float(latency[1]) <= float(latency[2])

        archive = pq.read_table(tmp_path / "archive")
        assert archive.num_rows == rows
        assert len(pc.unique(archive["id"])) == rows
        assert set(archive["queue"].to_pylist()) == {"shop_pageview"}
        assert set(archive["state"].to_pylist()) == {"done"}
        assert pc.all(pc.greater_equal(archive["finished_at"], archive["enqueued_at"])).as_py()
        assert pc.all(pc.starts_with(archive["path"], "/")).as_py()

        chart = tmp_path / "throughput.png"
        assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        height, width, _ = image.imread(chart).shape  # decodes every pixel
        assert width > 800 and height > 400
