"""A progress line for long batch operations of the command lines (``dbqueue purge``,
``dbqueue archive``, ``manage.py archivequeue``)."""

from __future__ import annotations

import time
from typing import TextIO


class Progress:
    """``<verb> 12,000 / 50,000`` on stderr: rewritten in place on a terminal; elsewhere (a
    log file, a pipe) a new line at each tenth of the way and at the end, so a long purge does
    not flood a log. With ``rate``, each line also says how many items a second went since the
    start (``deleted 12,000 / 50,000, 8,400/s``)."""

    def __init__(
        self, verb: str, total: int, stream: TextIO, *, enabled: bool = True, rate: bool = False
    ) -> None:
        self.verb = verb
        self.total = total
        self.stream = stream
        self.enabled = enabled and total > 0
        self.rate = rate
        self.tty = stream.isatty()
        self.done = 0
        self._shown = -1
        self._tenth = 0
        self._start = time.monotonic()

    def _text(self) -> str:
        text = f"{self.verb} {self.done:,} / {self.total:,}"
        if self.rate:
            elapsed = time.monotonic() - self._start
            text += f", {self.done / elapsed:,.0f}/s" if elapsed > 0 else ""
        return text

    def _show(self, end: str) -> None:
        text = self._text()
        self.stream.write(f"\r{text}{end}" if self.tty else f"{text}\n")
        self.stream.flush()
        self._shown = self.done

    def add(self, n: int) -> None:
        """Count ``n`` more items done."""
        self.done += n
        tenth = self.done * 10 // self.total if self.total else 0
        if self.enabled and (self.tty or tenth > self._tenth):
            self._tenth = tenth
            self._show("")

    def finish(self) -> None:
        """The last count, if not shown yet (and the end of the line on a terminal)."""
        if not self.enabled:
            return
        if self._shown != self.done:
            self._show("\n")
        elif self.tty:
            self.stream.write("\n")
            self.stream.flush()
