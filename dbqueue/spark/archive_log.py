"""The archive's run log: what each run of each queue has done, kept beside the data.

``<archive>/_dbqueue_archive_log/<queue>/<run>.<n>-<stage>.json``, one small JSON file per
record (object stores cannot append), written all or nothing (see :mod:`dbqueue.spark.hadoop`).
Spark's and Arrow's readers skip folders whose name starts with an underscore, so the log is
never read as data. A record names the queue, the run, its cut-off, the stage reached, a row
count and when; the ``staged`` record also lists the run's Parquet files.

Stages, in order: ``started`` (rows: the archivable rows counted), ``staged`` (rows: the rows
written and verified, files: the files), ``written`` (the files are in place in the archive),
then ``deleted`` (rows: the rows deleted from the database) or ``discarded`` (the run's output
was thrown away, nothing was deleted). A run whose last stage is neither of the last two is
unfinished: the next run of the queue finishes it first (:mod:`dbqueue.spark.archive`).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field

from dbqueue.errors import DBQueueError
from dbqueue.spark.hadoop import HadoopFiles

LOG_DIR = "_dbqueue_archive_log"
STAGES = ("started", "staged", "written", "deleted", "discarded")
FINAL_STAGES = frozenset({"deleted", "discarded"})


class ArchiveLogError(DBQueueError):
    """The run log holds something this version cannot read."""


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One line of a run's history."""

    queue: str
    run: str
    stage: str
    cutoff: dt.datetime
    rows: int
    at: dt.datetime
    files: tuple[str, ...] = ()
    note: str = ""

    def to_json(self) -> str:
        return json.dumps(
            {
                "queue": self.queue,
                "run": self.run,
                "stage": self.stage,
                "cutoff": self.cutoff.isoformat(),
                "rows": self.rows,
                "at": self.at.isoformat(),
                "files": list(self.files),
                "note": self.note,
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> LogRecord:
        data = json.loads(text)
        return cls(
            queue=str(data["queue"]),
            run=str(data["run"]),
            stage=str(data["stage"]),
            cutoff=dt.datetime.fromisoformat(data["cutoff"]),
            rows=int(data["rows"]),
            at=dt.datetime.fromisoformat(data["at"]),
            files=tuple(str(f) for f in data.get("files", ())),
            note=str(data.get("note", "")),
        )


@dataclass(frozen=True, slots=True)
class RunState:
    """A run as its records tell it (at least its ``started`` record)."""

    records: tuple[LogRecord, ...] = field(default=())

    def _record(self, stage: str) -> LogRecord | None:
        return next((r for r in self.records if r.stage == stage), None)

    @property
    def started(self) -> LogRecord:
        record = self._record("started")
        assert record is not None
        return record

    @property
    def run(self) -> str:
        return self.started.run

    @property
    def cutoff(self) -> dt.datetime:
        return self.started.cutoff

    @property
    def expected(self) -> int:
        """The archivable rows counted when the run started."""
        return self.started.rows

    @property
    def stage(self) -> str:
        """The last stage reached."""
        return max((r.stage for r in self.records), key=STAGES.index)

    @property
    def staged(self) -> LogRecord | None:
        """The record listing the run's verified files, once the run got that far."""
        return self._record("staged")

    @property
    def finished(self) -> bool:
        return self.stage in FINAL_STAGES


class ArchiveLog:
    """The run log of queue ``queue`` in the archive at ``files``' root."""

    def __init__(self, files: HadoopFiles, queue: str) -> None:
        self.files = files
        self.queue = queue
        self.folder = f"{LOG_DIR}/{queue}"

    def add(
        self,
        run: str,
        stage: str,
        cutoff: dt.datetime,
        rows: int,
        *,
        files: tuple[str, ...] = (),
        note: str = "",
    ) -> LogRecord:
        """Record that ``run`` reached ``stage``."""
        now = dt.datetime.now(dt.UTC)
        record = LogRecord(self.queue, run, stage, cutoff, rows, now, files, note)
        name = f"{run}.{STAGES.index(stage)}-{stage}.json"
        self.files.write_text(f"{self.folder}/{name}", record.to_json())
        return record

    def runs(self) -> list[RunState]:
        """Every run of the queue, oldest first."""
        by_run: dict[str, list[LogRecord]] = {}
        for name in self.files.names(self.folder):
            if not name.endswith(".json") or name.startswith("."):
                continue
            try:
                record = LogRecord.from_json(self.files.read_text(f"{self.folder}/{name}"))
            except (ValueError, KeyError, TypeError) as exc:
                raise ArchiveLogError(
                    f"archive log record {self.files.uri(self.folder)}/{name} is unreadable "
                    f"({exc}); move it aside if it is not dbqueue's"
                ) from None
            by_run.setdefault(record.run, []).append(record)
        states = [RunState(tuple(rs)) for rs in by_run.values() if _has_start(rs)]
        return sorted(states, key=lambda s: s.started.at)

    def unfinished(self) -> list[RunState]:
        """The runs that neither deleted their rows nor were discarded, oldest first."""
        return [s for s in self.runs() if not s.finished]


def _has_start(records: list[LogRecord]) -> bool:
    return any(r.stage == "started" for r in records)
