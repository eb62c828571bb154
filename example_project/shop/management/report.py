"""What the demo commands (``manage.py demo``, ``manage.py demospark``) share: their checks,
their section titles and closing summary, and how they show rates and queue stats."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import connection


def positive(value: str) -> int:
    """An argparse type: an integer of at least 1."""
    number = int(value)
    if number < 1:
        raise ValueError(value)
    return number


def database_name() -> str:
    """The default database's product, version and Django vendor."""
    version = ".".join(str(part) for part in connection.get_database_version())
    return f"{connection.display_name} {version} (vendor {connection.vendor!r})"


def total_items(stats: dict[str, Any]) -> int:
    """Every item in the queue, whatever its state (expired leases are counted as leased)."""
    return sum(stats[k] for k in ("ready", "scheduled", "leased", "done", "failed"))


def format_stats(stats: dict[str, Any]) -> str:
    """A queue's ``stats()`` on one line."""
    age = stats["oldest_ready_age"]
    shown = "none" if age is None else f"{age.total_seconds():.3f}s"
    counts = ", ".join(f"{k} {stats[k]}" for k in stats if k != "oldest_ready_age")
    return f"{counts}, oldest_ready_age {shown}"


def rate(count: int, seconds: float) -> str:
    """``count`` messages in ``seconds`` as a rate, with both figures."""
    if count == 0 or seconds <= 0:
        return "n/a"
    return f"{count / seconds:,.0f} messages/s ({count:,} in {seconds:.3f} s)"


@dataclass
class Checks:
    """The demo's assertions: each is printed as it is made, and counted."""

    out: Any
    style: Any
    failed: list[str] = field(default_factory=list)
    passed: int = 0

    def __call__(self, ok: bool, what: str) -> bool:
        if ok:
            self.passed += 1
            self.out.write(f"  {self.style.SUCCESS('ok')}    {what}")
        else:
            self.failed.append(what)
            self.out.write(f"  {self.style.ERROR('FAIL')}  {what}")
        return ok


class Report(BaseCommand):
    """A demo command's output: section titles, the summary table, the verdict."""

    checks: Checks

    def section(self, title: str) -> None:
        """A blank line, then ``title`` as a heading."""
        self.stdout.write("")
        self.stdout.write(self.style.MIGRATE_HEADING(title))

    def summary(self, rows: list[tuple[str, str]]) -> None:
        """The closing table: one ``label | value`` line per row."""
        width = max(len(label) for label, _ in rows)
        rule = "-" * (width + 3 + max(len(value) for _, value in rows))
        self.stdout.write("")
        self.stdout.write(self.style.MIGRATE_HEADING("Summary"))
        self.stdout.write(rule)
        for label, value in rows:
            self.stdout.write(f"{label:<{width}} | {value}")
        self.stdout.write(rule)

    def verdict(self) -> None:
        """Print "Demo passed.", or raise CommandError (exit 1) naming the checks that failed."""
        if self.checks.failed:
            raise CommandError(
                f"{len(self.checks.failed)} check(s) failed: " + "; ".join(self.checks.failed)
            )
        self.stdout.write(self.style.SUCCESS("Demo passed."))
