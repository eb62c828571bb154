"""The total-queue check of a chaos run (after Jepsen's total-queue workload): every push that
returned must have been delivered (lost = 0), nothing was delivered that no push sent
(unexpected = 0), and a message delivered twice must be explained by a lease that expired
(at-least-once) — never through transactional pops."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
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
