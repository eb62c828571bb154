"""Run a tutorial's code as a reader would: its files written into a scratch project, its shell
commands and Python snippets run in order, in real processes.

A tutorial is read as a list of fenced code blocks:

* a ``python`` block whose first line is a comment naming a file (``# shop/models.py``) is
  that file, written into the project; ``# shop/models.py (continued)`` appends to it;
* any other ``python`` block is a snippet, run as the tutorial says (:class:`Tutorial`'s
  ``run_python``);
* a ``sh`` block is commands, one a line (``\\`` continues a line): ``python …``, and
  ``django-admin …`` (``python -m django``); ``pip install`` is skipped, since the test runs
  in an environment that has dbqueue installed; anything else fails the test, so a tutorial
  cannot show a command nobody runs.

HTML comments before a block, which the rendered page does not show, tell the test what a
reader does that a test cannot do the same way:

* ``<!-- test: skip -->``: the block is not run (an alternative, an interactive command);
* ``<!-- test: background -->``: the ``sh`` block's one command runs in the background (a
  worker), until ``<!-- test: stop -->``, which stops it as Ctrl-C does and checks it exited
  cleanly;
* ``<!-- test: wait-for [STATEMENTS; ]EXPRESSION -->``: poll, in a snippet process, until the
  Python expression is true (what a reader sees by waiting);
* ``<!-- test: check CODE -->``: a snippet the reader does not see, that must succeed
  (asserts what the page says happened);
* ``<!-- test: append -->``: the next file block is appended to its file;
* ``<!-- test: needs-django N -->`` / ``<!-- test: django-before N -->``: the block is run
  only on Django N or newer / older than N (``6``, ``6.1``): a feature or a default one
  version has and another has not, as the tutorial says in its text.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.processes import ROOT, run_process

DOCS = ROOT / "docs"
#: A fenced block, also one indented in a list item (its indentation is removed).
FENCE = re.compile(r"^( *)```(\w*)[^\n]*\n(.*?)^\1```\s*$", re.M | re.S)
DIRECTIVE = re.compile(r"<!--\s*test:\s*(.*?)\s*-->", re.S)
FILE = re.compile(r"^# ([\w./-]+\.\w+)( \(continued\))?\s*$")
#: How long a command, or a wait-for, may take before the test fails.
TIMEOUT = 120


@dataclass
class Block:
    """A fenced code block, and the test directives written before it."""

    lang: str
    code: str
    line: int
    directives: list[str] = field(default_factory=list)

    def has(self, name: str) -> bool:
        return any(d == name for d in self.directives)

    @property
    def file(self) -> tuple[str, bool] | None:
        """``(path, append)`` for a file block, else None."""
        first, _, _ = self.code.partition("\n")
        match = FILE.match(first) if self.lang == "python" else None
        if match is None:
            return None
        return match.group(1), bool(match.group(2)) or self.has("append")


def blocks(page: Path) -> list[Block]:
    """The page's code blocks, in order, each with the directives since the previous one."""
    text = page.read_text()
    found, start = [], 0
    for match in FENCE.finditer(text):
        directives = DIRECTIVE.findall(text, start, match.start())
        line = text.count("\n", 0, match.start()) + 1
        code = textwrap.dedent(match.group(3)) if match.group(1) else match.group(3)
        found.append(Block(match.group(2), code, line, directives))
        start = match.end()
    return found


def commands(code: str) -> Iterator[list[str]]:
    """The commands of a ``sh`` block as argument lists (continuations joined)."""
    for line in code.replace("\\\n", " ").splitlines():
        line = line.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            yield shlex.split(line)


class Tutorial:
    """A scratch project ``root`` that a tutorial's blocks are run in, with ``env``."""

    def __init__(
        self, root: Path, env: dict[str, str], run_python: Callable[[Tutorial, str], None]
    ) -> None:
        self.root = root
        self.env = env
        self.run_python = run_python
        self.background: subprocess.Popen[str] | None = None

    def run(self, page: Path) -> None:
        """Every block of ``page``, in order; an error names the block's line."""
        try:
            for block in blocks(page):
                try:
                    self.block(block)
                except Exception as exc:
                    raise AssertionError(f"{page.name}, block at line {block.line}: {exc}") from exc
        finally:
            if self.background is not None:
                self.background.kill()
                self.background.wait()

    def block(self, block: Block) -> None:
        for directive in block.directives:
            name, _, arg = directive.partition(" ")
            if name == "stop":
                self.stop()
            elif name == "wait-for":
                self.wait_for(arg)
            elif name == "check":
                self.run_python(self, arg)
        if block.has("skip") or not self.supported(block):
            return
        target = block.file
        if target is not None:
            path, append = target
            self.write(path, block.code, append=append)
        elif block.lang == "python":
            self.run_python(self, block.code)
        elif block.lang == "sh":
            for argv in commands(block.code):
                self.command(argv, background=block.has("background"))

    @staticmethod
    def supported(block: Block) -> bool:
        """False for a block that needs a newer Django than the one installed."""
        import django

        installed = django.VERSION[:2]
        for directive in block.directives:
            name, _, arg = directive.partition(" ")
            if name not in ("needs-django", "django-before"):
                continue
            version = tuple(int(n) for n in arg.split("."))
            if (installed < version) == (name == "needs-django"):
                return False
        return True

    def write(self, path: str, code: str, *, append: bool) -> None:
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("a" if append else "w") as f:
            f.write(("\n" if append else "") + code)

    def argv(self, argv: list[str]) -> list[str] | None:
        """The command to run for a tutorial command; None for one that is skipped."""
        match argv:
            case ["pip", "install", *_]:
                return None
            case ["python", *rest]:
                return [sys.executable, *rest]
            case ["django-admin", *rest]:
                return [sys.executable, "-m", "django", *rest]
            case ["dbqueue", *rest]:
                return [sys.executable, "-m", "dbqueue_sa.cli", *rest]
        raise AssertionError(f"the test does not know how to run {shlex.join(argv)!r}")

    def command(self, argv: list[str], *, background: bool = False) -> str:
        cmd = self.argv(argv)
        if cmd is None:
            return ""
        if background:
            assert self.background is None, "one background command at a time"
            self.background = subprocess.Popen(
                cmd, cwd=self.root, env=self.env, text=True,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            )  # fmt: skip
            return ""
        done = self.process(cmd)
        output = done.stdout + done.stderr
        if done.returncode != 0:
            raise AssertionError(f"{shlex.join(argv)} exited {done.returncode}:\n{output}")
        return output

    def process(self, cmd: list[str]) -> subprocess.CompletedProcess[str]:
        """``cmd`` run to completion in the project, as the reader's terminal runs it."""
        return run_process(cmd, self.env, cwd=self.root, timeout=TIMEOUT)

    def stop(self) -> str:
        """Stop the background command as Ctrl-C does; it must exit cleanly."""
        process, self.background = self.background, None
        assert process is not None, "stop: nothing runs in the background"
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=TIMEOUT)
        if process.returncode != 0:
            raise AssertionError(f"the background command exited {process.returncode}:\n{output}")
        return output

    def wait_for(self, directive: str) -> None:
        deadline = time.monotonic() + TIMEOUT
        setup, _, expression = directive.rpartition("; ")
        code = f"import sys\n{setup}\nsys.exit(0 if ({expression}) else 3)"
        while True:
            try:
                self.run_python(self, code)
                return
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                if self.background is not None and self.background.poll() is not None:
                    raise AssertionError(
                        f"the background command ended while waiting for {expression}:\n"
                        f"{self.background.communicate()[0]}"
                    ) from None
            time.sleep(0.5)


def environment(**extra: str) -> dict[str, str]:
    """This test run's environment, for a project of its own: the repository importable
    (dbqueue from this checkout), no settings module of the test suite's."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return {**env, **extra}
