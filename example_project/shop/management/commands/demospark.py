"""``manage.py demospark``: the shop's page views through Spark and the queue, end to end.

1. A DataFrame of ``--rows`` page views (``spark.range`` and computed columns) is pushed into
   the ``PageView`` queue with ``df.write.format("dbqueue")``: staged in parallel, published
   in one transaction.
2. ``manage.py runqueueworker shop.PageView``, a process of its own as a site runs it,
   processes them, and is stopped with SIGTERM (its graceful stop) once every view is done.
   The queue keeps them as done (``keep_done``), with the time each finished.
3. The archive job (what ``manage.py archivequeue`` runs) moves them into Parquet under
   ``<out>/archive``, partitioned by queue and day, and deletes them from the database.
4. Spark SQL over the archive (shop/analytics.py): messages per minute and the p50/p99 queue
   latency (finished minus enqueued), printed, and charted in ``<out>/throughput.png``.

Every step checks what it did; the command exits non-zero if any check fails. Each run starts
afresh: the queue is purged and the archive of earlier runs removed. Needs PostgreSQL (the
embedded server by default) and the ``spark`` extra.
"""

from __future__ import annotations

import datetime as dt
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError, CommandParser
from django.db import connection

from dbqueue.commandline import DEFAULT_MASTER
from dbqueue_django.management.commands.archivequeue import libpq_conninfo
from shop.analytics import Analysis, Bucket, analyse, write_chart
from shop.management.report import (
    Checks,
    Report,
    database_name,
    format_stats,
    positive,
    rate,
    total_items,
)
from shop.models import PageView

if TYPE_CHECKING:  # the spark extra is imported when the command runs
    from dbqueue.spark.archive import ArchiveResult

ROWS = 1_000_000
WORKER_THREADS = 2
#: Spark tasks the push is staged by (one COPY each); the machine's cores run them.
PUSH_PARTITIONS = 4
#: Seconds between two looks at the queue while the worker drains it.
PROGRESS_SECONDS = 5.0
#: The drain is given up when no item finished for this long (a stuck worker or database).
STALL_SECONDS = 120.0
#: How long the worker may take to finish its batch in hand after SIGTERM.
STOP_SECONDS = 60.0
#: The archive's cut-off age: it takes a positive one, and once the worker has stopped every
#: item finished before the archive reads the database clock, so 1 microsecond takes them all.
ALL_FINISHED = dt.timedelta(microseconds=1)
#: The shortest drain a worker rate is given for.
MEASURABLE_SECONDS = 1.0
USERS = 50_000
PRODUCTS = 500
#: The session's settings when the command starts Spark itself (not when one is active): no
#: web UI, UTC, room for the push's Arrow batches, few shuffle partitions for small results.
SPARK_CONFIG = {
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "2g",
    "spark.sql.shuffle.partitions": "4",
}


class Command(Report):
    help = (
        "Push page views from a Spark DataFrame into the PageView queue, drain it with "
        "runqueueworker, archive the done items to Parquet, and report messages per minute "
        "and p50/p99 queue latency with Spark SQL, charted in a PNG. Exits non-zero if any "
        "check fails. Needs PostgreSQL and the spark extra."
    )
    requires_system_checks = "__all__"

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--rows", type=positive, default=ROWS, help=f"page views to push (default {ROWS:,})"
        )
        parser.add_argument(
            "--concurrency",
            type=positive,
            default=WORKER_THREADS,
            help=f"runqueueworker threads (default {WORKER_THREADS})",
        )
        parser.add_argument(
            "--master", default=DEFAULT_MASTER, help=f"the Spark master (default {DEFAULT_MASTER})"
        )
        parser.add_argument(
            "--out",
            type=Path,
            default=settings.DEMO_DATA / "spark",
            help="the output folder: archive/, throughput.png, worker.log "
            "(default demo-data/spark)",
        )

    def handle(
        self, *args: Any, rows: int, concurrency: int, master: str, out: Path, **options: Any
    ) -> None:
        self.checks = Checks(self.stdout, self.style)
        started = time.perf_counter()
        out = out.resolve()
        try:
            from dbqueue.spark.archive_command import spark_session
        except ImportError as exc:
            raise CommandError(
                f"install the spark extra (pip install 'dbqueue[spark]'): {exc}"
            ) from None

        if connection.vendor != "postgresql":
            raise CommandError(
                f"demospark needs PostgreSQL (the Spark source reads and writes with psycopg), "
                f"not {connection.display_name}: unset DATABASE_URL for the embedded server, "
                f"or point it at a PostgreSQL database"
            )
        self.section("Database")
        call_command("migrate", verbosity=0, interactive=False)
        info = libpq_conninfo("default")
        database = database_name()
        self.stdout.write(f"  {database}: migrations applied")

        self.section("Clean up earlier runs")
        self.clean_up(out)

        self.section(f"Start Spark ({master})")
        with spark_session(master, "dbqueue-demo", SPARK_CONFIG) as spark:
            spark.sparkContext.setLogLevel("ERROR")
            self.stdout.write(f"  Spark {spark.version}, {spark.sparkContext.master}")
            self.section(f"Push {rows:,} page views from a DataFrame: format('dbqueue')")
            push_seconds = self.push(spark, info, rows)

            self.section(f"Process them: runqueueworker shop.PageView --concurrency {concurrency}")
            worker_line = self.process(concurrency, out / "worker.log", rows)

            archive_dir = out / "archive"
            self.section(f"Archive the done items to Parquet: {archive_dir}")
            result = self.archive(spark, info, archive_dir, rows)

            self.section("Spark SQL over the archive")
            analysis = self.analyse(spark, archive_dir, rows)

        self.section("Chart")
        chart = out / "throughput.png"
        self.chart(analysis, chart, rows, push_seconds)
        outcome = Outcome(
            database, rows, concurrency, push_seconds, worker_line, result, analysis, chart
        )
        self.summary(summary_rows(outcome, time.perf_counter() - started, self.checks))
        self.verdict()

    # -- steps --------------------------------------------------------------------------------

    def clean_up(self, out: Path) -> None:
        purged = PageView.queue.purge()
        archive_dir = out / "archive"
        existed = archive_dir.exists()
        shutil.rmtree(archive_dir, ignore_errors=True)
        (out / "throughput.png").unlink(missing_ok=True)
        out.mkdir(parents=True, exist_ok=True)
        self.stdout.write(
            f"  removed {purged:,} queued page views"
            + (f" and the archive {archive_dir}" if existed else "")
        )
        self.checks(total_items(PageView.queue.stats()) == 0, "the page-view queue is empty")

    def process(self, concurrency: int, log: Path, rows: int) -> str:
        """Run the worker until the ``rows`` views are done, then stop it; its last line."""
        worker = self.start_worker(concurrency, log)
        try:
            self.drain(worker, rows)
            return self.stop_worker(worker, log)
        finally:
            if worker.poll() is None:  # an error above: do not leave the worker running
                worker.kill()
                worker.wait()

    def start_worker(self, concurrency: int, log: Path) -> subprocess.Popen[bytes]:
        """``manage.py runqueueworker shop.PageView``, its output in ``log``.

        Started once the push is published, so that its rate is the worker's alone. (A
        worker idling on the emptied queue used to keep a pop planned for empty tables,
        nested loops over sequential scans, and one pop over the million rows took minutes;
        the publish now analyzes the tables, which makes every session plan again.)"""
        command = [
            sys.executable,
            "manage.py",
            "runqueueworker",
            "shop.PageView",
            f"--concurrency={concurrency}",
            "--log-level=WARNING",
        ]
        with log.open("wb") as output:
            # A fixed command: this interpreter and the project's manage.py.
            worker = subprocess.Popen(  # noqa: S603
                command, cwd=settings.BASE_DIR, stdout=output, stderr=subprocess.STDOUT
            )
        self.stdout.write(f"  pid {worker.pid}, output in {log}")
        return worker

    def push(self, spark: Any, info: str, rows: int) -> float:
        """Push ``rows`` page views in one DataFrame write; its seconds."""
        table = PageView.queue.spec.table
        views = page_views(spark, rows)
        self.stdout.write(f"  columns: {', '.join(f'{n} {t}' for n, t in views.dtypes)}")
        started = time.perf_counter()
        views.write.format("dbqueue").option("url", info).option("queue", table).mode(
            "append"
        ).save()
        seconds = time.perf_counter() - started
        self.stdout.write(f"  {rate(rows, seconds)}")
        stats = PageView.queue.stats()
        self.stdout.write(f"  {format_stats(stats)}")
        self.checks(total_items(stats) == rows, f"{rows:,} page views queued, none lost")
        return seconds

    def drain(self, worker: subprocess.Popen[bytes], rows: int) -> None:
        """Watch the queue until every view is done (or failed): a line every few seconds."""
        started = previous_time = last_change = time.monotonic()
        previous = 0
        while True:
            time.sleep(PROGRESS_SECONDS)
            stats = PageView.queue.stats()
            now = time.monotonic()
            done, failed = stats["done"], stats["failed"]
            self.stdout.write(
                f"  {now - started:6.1f} s  done {done:>10,}  ready {stats['ready']:>10,}  "
                f"leased {stats['leased']:>6,}  failed {failed:,}  "
                f"({(done - previous) / (now - previous_time):,.0f} /s)"
            )
            if done > previous:
                last_change = now
            previous, previous_time = done, now
            finished = done + failed >= rows
            if finished or worker.poll() is not None or now - last_change > STALL_SECONDS:
                break
        stats = PageView.queue.stats()
        self.checks(
            stats["done"] == rows and total_items(stats) == rows,
            f"all {rows:,} page views processed and kept as done ({format_stats(stats)})",
        )

    def stop_worker(self, worker: subprocess.Popen[bytes], log: Path) -> str:
        """SIGTERM: the worker finishes its batch in hand and exits 0. Its last line."""
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
        try:
            code = worker.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            worker.kill()
            code = worker.wait()
        lines = log.read_text(errors="replace").strip().splitlines()
        last = lines[-1] if lines else "(no output)"
        self.stdout.write(f"  runqueueworker: {last}")
        self.checks(code == 0, f"SIGTERM stopped the worker, exit status {code}")
        return last

    def archive(self, spark: Any, info: str, root: Path, rows: int) -> ArchiveResult:
        """The archive job on the queue's done items; its ArchiveResult."""
        from dbqueue.spark.archive import archive

        table = PageView.queue.spec.table
        result = archive(spark, info, table, ALL_FINISHED, str(root), progress=True)
        self.stdout.write(f"  {result.summary()}")
        self.stdout.write(f"  {rate(result.rows_written, result.seconds)}")
        for rel in result.files:
            self.stdout.write(f"  {rel}  {(root / rel).stat().st_size / 1e6:.1f} MB")
        self.checks(
            result.rows_written == rows == result.rows_deleted,
            f"{rows:,} rows written to Parquet and deleted from the database",
        )
        self.checks(total_items(PageView.queue.stats()) == 0, "the page-view queue is empty")
        return result

    def analyse(self, spark: Any, root: Path, rows: int) -> Analysis:
        """Run the queries of shop/analytics.py; print the per-minute table and the totals."""
        table = PageView.queue.spec.table
        analysis = analyse(spark, str(root), table)
        self.stdout.write(
            "  per minute of finish time (UTC; the first and last minutes are partial):"
        )
        self.stdout.write("")
        self.table(analysis.per_minute)
        self.stdout.write("")
        self.stdout.write(
            f"  all: {analysis.messages:,} messages; queue latency p50 {analysis.p50:.3f} s, "
            f"p99 {analysis.p99:.3f} s, max {analysis.slowest:.3f} s; first ack "
            f"{(analysis.first_finish - analysis.published).total_seconds():.2f} s after the "
            f"publish, last {(analysis.last_finish - analysis.published).total_seconds():.2f} s"
        )
        self.checks(analysis.messages == rows, f"the archive holds {rows:,} processed views")
        self.checks(0 <= analysis.p50 <= analysis.p99 <= analysis.slowest, "0 <= p50 <= p99 <= max")
        return analysis

    def table(self, rows: list[Bucket]) -> None:
        """The per-minute table: minute, messages, p50 and p99 queue latency."""
        self.stdout.write(
            f"  {'minute (UTC)':<16} {'messages':>10} {'p50 latency':>12} {'p99 latency':>12}"
        )
        self.stdout.write(f"  {'-' * 16} {'-' * 10} {'-' * 12} {'-' * 12}")
        for b in rows:
            self.stdout.write(
                f"  {b.start:%Y-%m-%d %H:%M} {b.messages:>10,} {b.p50:>10.2f} s {b.p99:>10.2f} s"
            )

    def chart(self, analysis: Analysis, path: Path, rows: int, push_seconds: float) -> None:
        title = f"{rows:,} page views: Spark push, runqueueworker, Parquet archive"
        subtitle = (
            f"push {rows / push_seconds:,.0f} rows/s; worker {worker_rate(analysis, short=True)}; "
            f"queue latency p50 {analysis.p50:.2f} s, p99 {analysis.p99:.2f} s "
            f"(backlog of one bulk push); bars per {analysis.chart_seconds} s"
        )
        write_chart(analysis, path, title, subtitle)
        with path.open("rb") as png:
            signature = png.read(8)
        self.stdout.write(f"  {path} ({path.stat().st_size / 1e3:.0f} kB)")
        self.checks(signature == b"\x89PNG\r\n\x1a\n", "the chart is a PNG")


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a run measured, for the summary."""

    database: str
    rows: int
    concurrency: int
    push_seconds: float
    worker_line: str
    archived: ArchiveResult
    analysis: Analysis
    chart: Path


def summary_rows(run: Outcome, seconds: float, checks: Checks) -> list[tuple[str, str]]:
    """The closing summary: the figures of every step."""
    analysis, archived = run.analysis, run.archived
    return [
        ("database", run.database),
        ("where", settings.SHOP_DATABASE_DESCRIPTION),
        ("push (Spark)", rate(run.rows, run.push_seconds) + f", {PUSH_PARTITIONS} partitions"),
        (
            "worker",
            worker_rate(analysis)
            + f"; runqueueworker --concurrency {run.concurrency}: {run.worker_line}",
        ),
        (
            "archive",
            rate(archived.rows_written, archived.seconds)
            + f", {len(archived.files)} file(s); "
            + ", ".join(f"{k} {v:.1f} s" for k, v in archived.phases.items()),
        ),
        ("messages per minute", per_minute_line(analysis.per_minute)),
        (
            "queue latency",
            f"p50 {analysis.p50:.2f} s, p99 {analysis.p99:.2f} s, max {analysis.slowest:.2f} s",
        ),
        ("chart", str(run.chart)),
        ("checks", f"{checks.passed} passed, {len(checks.failed)} failed"),
        ("run time", f"{seconds:.1f} s"),
    ]


def page_views(spark: Any, rows: int) -> Any:
    """A DataFrame of ``rows`` page views, computed from ``spark.range``: user ids spread over
    USERS users, mostly product pages, some carts and checkouts, durations up to 3 s."""
    from pyspark.sql import functions as F  # noqa: N812 (PySpark's own convention)

    n = F.col("id")
    # pmod, not abs(hash) % n: abs of the smallest long overflows (an error in ANSI mode).
    product = F.pmod(F.xxhash64(n), F.lit(PRODUCTS)).cast("string")
    return spark.range(0, rows, numPartitions=PUSH_PARTITIONS).select(
        F.pmod(F.xxhash64(n, F.lit("user")), F.lit(USERS)).alias("user_id"),
        F.when(n % 20 == 0, "/cart")
        .when(n % 50 == 1, "/checkout")
        .otherwise(F.concat(F.lit("/products/"), product))
        .alias("path"),
        (F.pmod(F.hash(n), F.lit(3000)) + 20).alias("duration_ms"),
    )


def per_minute_line(rows: list[Bucket]) -> str:
    """The per-minute counts on one line."""
    return ", ".join(f"{b.start:%H:%M} {b.messages:,}" for b in rows)


def worker_rate(analysis: Analysis, *, short: bool = False) -> str:
    """The worker's rate from its first ack to its last, when they are a second apart or more
    (a small run is acked in a batch or two: no rate to speak of)."""
    seconds = analysis.draining_seconds
    if seconds < MEASURABLE_SECONDS:
        return "n/a (acked within a second)"
    if short:
        return f"{analysis.messages / seconds:,.0f} messages/s"
    return rate(analysis.messages, seconds) + ", first ack to last"
