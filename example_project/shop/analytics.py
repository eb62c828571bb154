"""The page-view analytics: Spark SQL over the Parquet archive of the ``PageView`` queue
(messages per minute, p50/p99 queue latency) and a PNG chart of them.

The archive holds, per processed item, ``enqueued_at`` (when its push was published) and
``finished_at`` (when the worker acked it); its queue latency is the difference. Times go
through SQL as epoch microseconds, so neither the session's nor this process's time zone
changes a figure or a label.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The archive's rows, with each one's latency in seconds (a temporary view of the session,
#: made from a DataFrame: the folder and the queue name are values, not SQL text).
LATENCY_VIEW = "page_view_latency"
LATENCY_COLUMNS = (
    "unix_micros(enqueued_at) AS enqueued_us",
    "unix_micros(finished_at) AS finished_us",
    "CAST(unix_micros(finished_at) - unix_micros(enqueued_at) AS DOUBLE) / 1e6 AS latency",
)
#: Messages and latency percentiles per bucket of ``:seconds`` seconds of finish time, the
#: buckets counted from ``:origin`` (epoch microseconds): 0 for the clock's minutes. Named
#: parameters, bound by Spark.
BUCKETS_SQL = f"""
SELECT :origin + floor((finished_us - :origin) / (:seconds * 1000000))
                 * :seconds * 1000000 AS start_us,
       count(*) AS messages,
       percentile_approx(latency, 0.5) AS p50,
       percentile_approx(latency, 0.99) AS p99
FROM {LATENCY_VIEW}
GROUP BY 1
ORDER BY 1
"""
TOTALS_SQL = f"""
SELECT count(*) AS messages,
       percentile_approx(latency, 0.5) AS p50,
       percentile_approx(latency, 0.99) AS p99,
       max(latency) AS slowest,
       min(enqueued_us) AS published_us,
       min(finished_us) AS first_us,
       max(finished_us) AS last_us
FROM {LATENCY_VIEW}
"""
#: The chart's bucket sizes, in seconds: the largest that still gives CHART_BARS bars.
CHART_BUCKETS = (1, 2, 5, 10, 15, 30, 60)
CHART_BARS = 20


@dataclass(frozen=True, slots=True)
class Bucket:
    """The messages that finished in one bucket of time (from ``start``), and their latency
    percentiles."""

    start: dt.datetime
    messages: int
    p50: float
    p99: float


@dataclass(frozen=True, slots=True)
class Analysis:
    """What the queries found: the totals, per minute of the clock, and per chart bucket
    (counted from the publish)."""

    messages: int
    p50: float
    p99: float
    slowest: float
    published: dt.datetime
    first_finish: dt.datetime
    last_finish: dt.datetime
    per_minute: list[Bucket]
    chart_seconds: int
    per_chart_bucket: list[Bucket]

    @property
    def draining_seconds(self) -> float:
        """From the first ack to the last."""
        return (self.last_finish - self.first_finish).total_seconds()


def _time(micros: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(micros / 1e6, dt.UTC)


def buckets(spark: Any, seconds: int, origin_us: int = 0) -> list[Bucket]:
    """The finished messages (of the latency view) grouped by ``seconds`` of finish time,
    counted from ``origin_us``: by default the clock's own (whole minutes, ...)."""
    rows = spark.sql(BUCKETS_SQL, args={"seconds": seconds, "origin": origin_us}).collect()
    return [Bucket(_time(r.start_us), r.messages, r.p50, r.p99) for r in rows]


def chart_bucket(span: float) -> int:
    """The largest of CHART_BUCKETS that cuts ``span`` seconds into CHART_BARS bars or more."""
    fitting = [size for size in CHART_BUCKETS if span / size >= CHART_BARS]
    return max(fitting, default=CHART_BUCKETS[0])


def analyse(spark: Any, root: str, queue: str) -> Analysis:
    """Query the archive in ``root`` (a folder the archive job writes) for queue ``queue``."""
    from pyspark.sql import functions as sf

    archive = spark.read.parquet(root)
    done = archive.where((sf.col("queue") == queue) & (sf.col("state") == "done"))
    # Cached: the three queries below read it, and Parquet would be scanned for each.
    latency = done.selectExpr(*LATENCY_COLUMNS).cache()
    latency.createOrReplaceTempView(LATENCY_VIEW)
    try:
        totals = spark.sql(TOTALS_SQL).collect()[0]
        if not totals.messages:
            raise ValueError(f"the archive in {root} holds no processed item of queue {queue!r}")
        first, last = _time(totals.first_us), _time(totals.last_us)
        size = chart_bucket((last - first).total_seconds())
        return Analysis(
            messages=totals.messages,
            p50=totals.p50,
            p99=totals.p99,
            slowest=totals.slowest,
            published=_time(totals.published_us),
            first_finish=first,
            last_finish=last,
            per_minute=buckets(spark, 60),
            chart_seconds=size,
            per_chart_bucket=buckets(spark, size, totals.published_us),
        )
    finally:
        latency.unpersist()


def write_chart(analysis: Analysis, path: Path, title: str, subtitle: str) -> None:
    """A PNG: the messages acked per chart bucket as bars (in messages per minute, the table's
    unit), the p50 and p99 queue latency of each as lines on a second axis; the x axis is the
    time since the push was published, where the chart's buckets start."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    size = analysis.chart_seconds
    shown = analysis.per_chart_bucket
    x = [(b.start - analysis.published).total_seconds() + size / 2 for b in shown]
    fig, bars = plt.subplots(figsize=(11, 6.2), dpi=110)
    try:
        bars.bar(
            x,
            [b.messages * 60 / size for b in shown],
            width=size * 0.85,
            color="#4c78a8",
            label=f"messages per minute (acked in each {size} s)",
        )
        bars.axvspan(
            0,
            (analysis.first_finish - analysis.published).total_seconds(),
            color="#dddddd",
            alpha=0.6,
            label="before the first ack: the publish (one statement), the worker's start",
        )
        bars.set_xlabel("seconds since the push was published (its rows' enqueued_at)")
        bars.set_ylabel("messages per minute")
        bars.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        bars.set_xlim(left=0)
        lines = bars.twinx()
        lines.plot(x, [b.p50 for b in shown], "o-", color="#f58518", label="p50 queue latency")
        lines.plot(x, [b.p99 for b in shown], "s--", color="#e45756", label="p99 queue latency")
        lines.set_ylabel("queue latency, s (finished - enqueued)")
        lines.set_ylim(bottom=0)
        handles = [*bars.get_legend_handles_labels()[0], *lines.get_legend_handles_labels()[0]]
        bars.legend(
            handles=handles,
            loc="upper center",
            bbox_to_anchor=(0.5, -0.13),
            ncol=2,
            fontsize=9,
            frameon=False,
        )
        bars.grid(axis="y", alpha=0.3)
        fig.suptitle(title, fontsize=13, fontweight="bold")
        bars.set_title(subtitle, fontsize=9.5, color="#444444")
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
    finally:
        plt.close(fig)
