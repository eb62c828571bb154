"""Run the test suite and fail loudly when nothing was tested.

Usage: python scripts/run_tests.py [extra pytest arguments]

Runs ``python -m pytest -n auto --dist loadgroup`` with this same interpreter from
the repository root, streaming pytest's output as it comes. The exit code is
pytest's, except that a run which tested nothing is a failure:

* pytest exit code 5 (no tests collected) becomes 1;
* a "successful" run whose summary shows no passed test (everything skipped,
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


def main(argv: list[str]) -> int:
    cmd = [sys.executable, "-m", "pytest", "-n", "auto", "--dist", "loadgroup", *argv]
    if sys.stdout.isatty() and not any(a.startswith("--color") for a in argv):
        # pytest writes to a pipe here; keep colours when a person is watching.
        cmd.append("--color=yes")
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

    if rc == NO_TESTS_COLLECTED:
        print("run_tests: pytest collected no tests: no test ran: this is a failure", flush=True)
        return 1
    if rc == 0:
        text = ANSI.sub("", b"".join(chunks).decode("utf-8", errors="replace"))
        if not any(PASSED.search(line) for line in text.splitlines()):
            print(
                "run_tests: pytest succeeded but reported 0 passed "
                "(everything skipped or deselected): this is a failure",
                flush=True,
            )
            return 1
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
