"""docs/tutorial/sqlalchemy.md, run end to end in an empty directory as a reader runs it: the
files written, the snippets run one after the other in one Python process (as in a REPL: a
snippet uses what the ones before it defined), the ``dbqueue`` commands run in real
processes on SQLite, the worker in the background where the page starts it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.tutorial import DOCS, TIMEOUT, Tutorial, blocks, environment

pytestmark = [pytest.mark.sqlalchemy, pytest.mark.sqlite, pytest.mark.slow]
PAGE = DOCS / "tutorial" / "sqlalchemy.md"
DONE = "\x00snippet-done "
#: The interpreter the snippets run in: reads one JSON-encoded snippet a line, runs it in one
#: namespace, and ends its output with a line saying whether it raised.
REPL = f"""
import json, sys, traceback
namespace = {{"__name__": "__main__"}}
for line in sys.stdin:
    try:
        exec(compile(json.loads(line), "<snippet>", "exec"), namespace)
        outcome = "ok"
    except BaseException:
        outcome = json.dumps(traceback.format_exc())
    print({DONE!r} + outcome, flush=True)
"""


class Repl:
    """One Python process that runs the page's snippets in order, in one namespace."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-u", "-c", REPL], cwd=root, env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def __call__(self, tutorial: Tutorial, code: str) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(code) + "\n")
        self.process.stdin.flush()
        output: list[str] = []
        for line in self.process.stdout:
            if line.startswith(DONE):
                outcome = line[len(DONE) :].strip()
                if outcome != "ok":
                    raise AssertionError(f"{code}\n{''.join(output)}{json.loads(outcome)}")
                return
            output.append(line)
        raise AssertionError(f"the snippets' interpreter ended:\n{''.join(output)}")

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=TIMEOUT)


def wait_for(tutorial: Tutorial, code: str) -> None:
    """A wait-for or a check: in a process of its own, like a second terminal."""
    done = tutorial.process([sys.executable, "-c", code])
    if done.returncode != 0:
        raise AssertionError(f"{code}\nexited {done.returncode}:\n{done.stderr}")


class SATutorial(Tutorial):
    """Snippets in the one REPL; the hidden waits and checks in processes of their own."""

    def __init__(self, root: Path, repl: Repl) -> None:
        super().__init__(root, environment(), repl)
        self.repl = repl

    def wait_for(self, directive: str) -> None:
        self.run_python, saved = wait_for, self.run_python
        try:
            super().wait_for(directive)
        finally:
            self.run_python = saved


def test_the_sqlalchemy_tutorial_runs_as_written(tmp_path: Path) -> None:
    repl = Repl(tmp_path, environment())
    try:
        SATutorial(tmp_path, repl).run(PAGE)
    finally:
        repl.close()
    assert (tmp_path / "shop.sqlite3").exists()


def test_every_block_of_the_tutorial_is_run() -> None:
    found = blocks(PAGE)
    assert not [b.line for b in found if b.has("skip")]
    assert {b.lang for b in found} == {"sh", "python"}
