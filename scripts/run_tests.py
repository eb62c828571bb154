"""Run the test suite and fail loudly when nothing was tested.

Usage: python scripts/run_tests.py [extra pytest arguments]

Runs ``python -m pytest -n auto --dist loadgroup --solo=exclude`` with this same
interpreter from the repository root, streaming pytest's output as it comes, then the
tests marked ``solo`` alone in one process (``--solo=only -n 0``): they measure storage
that other load on a 2-core machine skews. The extra arguments go to both runs. The exit
code is the first failing run's, except that a run which tested nothing is a failure:

* both runs collecting nothing (pytest exit code 5) becomes 1 (one of them may: a path
  argument can select only solo tests, or none);
* a "successful" run whose summaries show no passed test (everything skipped,
  deselected or xfailed) becomes 1.

A green run must mean that tests ran and passed, not that they were all skipped
because a database was missing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PASSED = re.compile(r"\b\d+ passed\b")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
NO_TESTS_COLLECTED = 5


def run(cmd: list[str]) -> tuple[int, str]:
    """Run one pytest command, streaming its output; its exit code and its output."""
    print("+ " + " ".join(cmd), flush=True)
    out = sys.stdout.buffer
    chunks: list[bytes] = []
    # The command is this interpreter running pytest with our own arguments.
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    try:
        while chunk := os.read(fd, 65536):
            out.write(chunk)
            out.flush()
            chunks.append(chunk)
    except KeyboardInterrupt:
        # pytest received the same SIGINT; let it finish its report.
        pass
    finally:
        rc = proc.wait()
        proc.stdout.close()
    return rc, ANSI.sub("", b"".join(chunks).decode("utf-8", errors="replace"))


def main(argv: list[str]) -> int:
    pytest = [sys.executable, "-m", "pytest"]
    if sys.stdout.isatty() and not any(a.startswith("--color") for a in argv):
        # pytest writes to a pipe here; keep colours when a person is watching.
        pytest.append("--color=yes")
    runs = (
        [*pytest, "-n", "auto", "--dist", "loadgroup", "--solo=exclude", *argv],
        # "-n 0" last: it overrides a "-n" among the extra arguments.
        [*pytest, "--solo=only", *argv, "-n", "0"],
    )
    codes: list[int] = []
    texts: list[str] = []
    for cmd in runs:
        rc, text = run(cmd)
        codes.append(rc)
        texts.append(text)
        if rc not in (0, NO_TESTS_COLLECTED):
            return rc
    if all(rc == NO_TESTS_COLLECTED for rc in codes):
        print("run_tests: pytest collected no tests: no test ran: this is a failure", flush=True)
        return 1
    if not any(PASSED.search(line) for text in texts for line in text.splitlines()):
        print(
            "run_tests: pytest succeeded but reported 0 passed "
            "(everything skipped or deselected): this is a failure",
            flush=True,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
