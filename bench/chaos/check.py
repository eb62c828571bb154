"""The total-queue check of a chaos run (after Jepsen's total-queue workload): every push that
returned must have been delivered (lost = 0), nothing was delivered that no push sent
(unexpected = 0), and a message delivered twice must be explained by a lease that expired
(at-least-once) — never through transactional pops; and every dump the pg_dump actor took held
every message it had to (see :class:`DumpVerdict`)."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Verdict:
    """The check of one queue."""

    queue: str
    pushed: int
    uncertain: int
    delivered: int
    distinct: int
    lost: int
    unexpected: int
    duplicates: int
    #: The most duplicates the run's faults can explain (None: none allowed).
    allowed_duplicates: int

    @property
    def ok(self) -> bool:
        return (
            self.lost == 0 and self.unexpected == 0 and self.duplicates <= self.allowed_duplicates
        )

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def read_pushes(logs: Iterable[Path]) -> tuple[set[str], set[str]]:
    """(keys whose push returned, keys whose outcome is unknown) from producer logs."""
    pushed: set[str] = set()
    uncertain: set[str] = set()
    for path in logs:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("+"):
                pushed.add(line[1:])
            elif line.startswith("?"):
                uncertain.add(line[1:])
    return pushed, uncertain


def read_deliveries(logs: Iterable[Path]) -> Counter[str]:
    """How many times each key was handled, from worker logs (a last line cut by a SIGKILL
    is not a delivery the worker finished writing: it is left out)."""
    seen: Counter[str] = Counter()
    for path in logs:
        text = path.read_text(encoding="utf-8")
        lines = text.split("\n")
        for line in lines[:-1]:  # the text after the last newline is unfinished
            if line:
                seen[line] += 1
    return seen


def judge(
    queue: str,
    pushed: set[str],
    uncertain: set[str],
    delivered: Counter[str],
    allowed_duplicates: int,
) -> Verdict:
    """The verdict on one queue."""
    keys = set(delivered)
    return Verdict(
        queue=queue,
        pushed=len(pushed),
        uncertain=len(uncertain),
        delivered=sum(delivered.values()),
        distinct=len(keys),
        lost=len(pushed - keys),
        unexpected=len(keys - pushed - uncertain),
        duplicates=sum(delivered.values()) - len(keys),
        allowed_duplicates=allowed_duplicates,
    )


# -- the dumps -------------------------------------------------------------------------------
#
# The pg_dump actor (bench.chaos.actors, role "dumper") dumps the database again and again and
# checks each dump: every message whose push had returned before pg_dump started, and that no
# consumer had taken before its snapshot, must be in it. The producers' logs say what was
# pushed ("+key", written once the push returned), the workers' logs what was taken: a key
# is written by the handler before its ack, so an ack that committed before the dump's
# snapshot is in the logs once pg_dump holds a lock on a table of ours (it takes them after
# its snapshot), where the dumper reads them (or, if it missed that moment, once pg_dump
# ended: fewer messages checked, none wrongly). For the transactional consumer the dump itself
# tells, in its copy of chaos_done: a key is either still queued or there, in any snapshot.


@dataclass
class DumpVerdict:
    """The check of a run's dumps."""

    taken: int = 0
    #: pg_dump failed (the server crash-restarted under it): nothing to check.
    failed: int = 0
    checked: int = 0
    #: Dumps checked against the deliveries logged before their snapshot (the others: before
    #: their end).
    early: int = 0
    #: Per queue, the messages that had to be in a dump, summed over the dumps checked, and
    #: those of them a dump did not hold.
    items: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    missing: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    examples: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(self.missing.values()) and self.checked > 0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}

    def add(self, line: str) -> None:
        """Take in a line of the dumper's log (JSON: see :func:`dump_line`)."""
        dump = json.loads(line)
        self.taken += 1
        if not dump["ok"]:
            self.failed += 1
            return
        self.checked += 1
        self.early += bool(dump.get("early"))
        for queue, count in dump["items"].items():
            self.items[queue] += count
            self.missing[queue] += dump["missing"][queue]
        self.examples += dump["examples"][: max(0, 10 - len(self.examples))]


def read_dumps(log: Path) -> DumpVerdict:
    """The verdict on the dumps the dumper's log records (its last line may be cut short)."""
    verdict = DumpVerdict()
    if log.exists():
        for line in log.read_text(encoding="utf-8").split("\n")[:-1]:
            verdict.add(line)
    return verdict


def dump_line(
    index: int,
    required: dict[str, set[str]] | None,
    held: dict[str, set[str]] | None = None,
    *,
    early: bool = False,
    error: str = "",
) -> str:
    """A line of the dumper's log: dump ``index``, what had to be in it per queue and what it
    held (``early``: the deliveries were read as soon as its snapshot was taken), or the
    ``error`` pg_dump failed with (``required`` None)."""
    if required is None or held is None:
        return json.dumps({"dump": index, "ok": False, "error": error})
    missing = {queue: sorted(keys - held[queue]) for queue, keys in required.items()}
    return json.dumps(
        {
            "dump": index,
            "ok": True,
            "early": early,
            "items": {queue: len(keys) for queue, keys in required.items()},
            "missing": {queue: len(keys) for queue, keys in missing.items()},
            "examples": [f"{queue} {key}" for queue, keys in missing.items() for key in keys][:5],
        }
    )


class Outstanding:
    """The messages pushed and not yet taken, per queue ("split", "ring", "tx"), as the logs in
    ``logs`` tell so far: each read takes in the lines appended since the last one."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.keys: dict[str, set[str]] = defaultdict(set)
        self._taken_first: dict[str, set[str]] = defaultdict(set)  # before their push was read
        self._offsets: dict[Path, int] = {}

    def _lines(self, pattern: str) -> Iterable[tuple[str, str]]:
        """(queue, line) of the complete lines added to the logs ``pattern`` names."""
        for path in sorted(self.logs.glob(pattern)):
            start = self._offsets.get(path, 0)
            with path.open("rb") as f:
                f.seek(start)
                data = f.read()
            end = data.rfind(b"\n") + 1
            self._offsets[path] = start + end
            queue = path.name.split("-")[1]
            for line in data[:end].decode("utf-8").splitlines():
                yield queue, line

    def read_pushes(self) -> None:
        for queue, line in self._lines("producer-*.log"):
            if line.startswith("+"):
                key = line[1:]
                if key in self._taken_first[queue]:
                    self._taken_first[queue].discard(key)
                else:
                    self.keys[queue].add(key)

    def read_deliveries(self) -> dict[str, set[str]]:
        """Take in the workers' deliveries since the last read; the keys, per queue."""
        taken: dict[str, set[str]] = defaultdict(set)
        for queue, line in self._lines("worker-*.log"):
            if line:
                self.taken(queue, {line})
                taken[queue].add(line)
        return taken

    def taken(self, queue: str, keys: set[str]) -> None:
        """Messages of ``queue`` taken for good."""
        for key in keys:
            if key in self.keys[queue]:
                self.keys[queue].discard(key)
            else:
                self._taken_first[queue].add(key)


def copied_rows(text: str) -> dict[str, list[dict[str, str | None]]]:
    """The rows of each table in a plain-format dump's data (``pg_restore --data-only -f -``):
    its COPY blocks, a row a dict by column (NULL as None; the chaos run's values need no
    unescaping)."""
    tables: dict[str, list[dict[str, str | None]]] = {}
    columns: list[str] | None = None
    rows: list[dict[str, str | None]] = []
    for line in text.split("\n"):
        if columns is None:
            found = re.match(r"COPY (?:[\w\"]+\.)?\"?(\w+)\"? \((.*)\) FROM stdin;$", line)
            if found:
                columns = [c.strip().strip('"') for c in found.group(2).split(",")]
                rows = tables.setdefault(found.group(1), [])
        elif line == "\\.":
            columns = None
        else:
            values = [None if v == "\\N" else v for v in line.split("\t")]
            rows.append(dict(zip(columns, values, strict=True)))
    return tables


def split_keys(tables: dict[str, list[dict[str, str | None]]], data: str, meta: str) -> set[str]:
    """The messages a split queue held: data rows whose meta row is there too."""
    ids = {row["id"] for row in tables.get(meta, [])}
    return {str(row["key"]) for row in tables.get(data, []) if row["id"] in ids}


def ring_keys(tables: dict[str, list[dict[str, str | None]]], slots: str, side: str) -> set[str]:
    """The messages a ring held: its slots that hold one (ready or leased), and its side
    table's."""
    held = {str(row["key"]) for row in tables.get(slots, []) if row["state"] in ("1", "2")}
    return held | {str(row["key"]) for row in tables.get(side, [])}
