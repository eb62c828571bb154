"""Run the whole test suite, and end the log on its real total.

Usage: python scripts/run_tests.py [--also SUITE PYTHON]... [--no-main] [pytest arguments]

A run is made of *suites*, each run by one interpreter (a virtualenv's python):

* ``main``, this interpreter: every test;
* the extra suites named with ``--also`` (see :data:`SUITES`), e.g. ``--also django52
  .venv-django52/bin/python``: the tests a lower supported version of a framework changes,
  run again in a venv that has that version.

Each suite runs in up to two *passes*: the parallel one (``-n auto --dist loadgroup
--solo=exclude``), then the tests marked ``solo`` alone in one process (``--solo=only -n 0``):
they measure storage that other load on a 2-core machine skews. The solo pass is skipped when
the parallel pass reports that its selection holds no solo test (tests/conftest.py writes that
count to the file named by ``DBQUEUE_SOLO_COUNT_FILE``), so no pass prints "no tests ran".
The extra pytest arguments go to every pass.

After the last pass, one line per pass and the summed totals; the very last line of the log
is ``N passed, N failed, N skipped in T s`` (errors count as failed), which CI reads. The exit
code is 1 when a test failed or errored, when a pass crashed (pytest's own exit codes 2-4 stop
the run at once), or when no test passed at all: a green run must mean that tests ran and
passed, not that they were all skipped because a database was missing.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
#: pytest's final summary line: "==== 850 passed, 1 skipped, 2 warnings in 151.38s ====".
SUMMARY = re.compile(r"^=+ (?P<body>.*\bin [\d.]+s\b.*?) =+$")
COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)\b")
NO_TESTS_COLLECTED = 5
TESTS_FAILED = 1

#: The extra suites, by name: the tests a lower supported version changes, and why only those.
SUITES: dict[str, list[str]] = {
    # Django 5.2 LTS: the Django-facing tests. Only the reliability tests that go through
    # runqueueworker (the ring's concurrency and bloat tests drive the core alone); not the
    # SQLAlchemy fronts, which do not touch Django; not the conformance suite, whose cases
    # run the same SQL through the same executor on every version (tests/django covers the
    # executor's use of Django's transaction state, which is what a version could change); not
    # Spark (a JVM each, ~2 minutes; the Django commands that start Spark use only the
    # management API both versions share); not Django's own Tasks tests (django_tasks):
    # Django 5.2 has no Tasks framework.
    "django52": [
        "tests/django",
        "tests/docs",
        "tests/example",
        "tests/reliability/test_crashes.py",
        "-m",
        "not sqlalchemy and not spark and not django_tasks",
    ],
    # SQLAlchemy 2.0, the lowest the package accepts: the SQLAlchemy tests (Alembic and the
    # CLI included) and the conformance suite's SQLAlchemy fronts, sync and asyncio, and the
    # SQLAlchemy tutorial; not Spark (a JVM each; the archive command's SQLAlchemy part is the
    # CLI's, tested here).
    "sqlalchemy20": [
        "tests/sqlalchemy",
        "tests/conformance",
        "tests/docs/test_sqlalchemy_tutorial.py",
        "-m",
        "sqlalchemy and not spark",
    ],
}


@dataclass
class Totals:
    """The counts of one pass's summary line (or of several, summed)."""

    counts: dict[str, int] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> Totals | None:
        """The counts of the last summary line in ``text``, or None if it has none."""
        for line in reversed(text.splitlines()):
            match = SUMMARY.match(line.strip())
            if match:
                counts: dict[str, int] = {}
                for number, word in COUNT.findall(match.group("body")):
                    key = "errors" if word.startswith("error") else word
                    counts[key] = counts.get(key, 0) + int(number)
                return cls(counts)
        return None

    def get(self, key: str) -> int:
        return self.counts.get(key, 0)

    @property
    def failed(self) -> int:
        """Failed tests and errors (setup, teardown or collection)."""
        return self.get("failed") + self.get("errors")

    def add(self, other: Totals) -> None:
        for key, value in other.counts.items():
            self.counts[key] = self.get(key) + value

    def describe(self) -> str:
        order = ("passed", "failed", "errors", "skipped", "xfailed", "xpassed", "deselected")
        return ", ".join(f"{self.get(k)} {k}" for k in order if self.get(k)) or "nothing"


def run(cmd: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run one pytest command, streaming its output; its exit code and its output."""
    print("+ " + " ".join(cmd), flush=True)
    out = sys.stdout.buffer
    chunks: list[bytes] = []
    # The command is an interpreter of ours running pytest with our own arguments.
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
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


@dataclass
class Pass:
    """One pytest run of a suite, and how it ended."""

    label: str
    rc: int = 0
    totals: Totals | None = None


def run_suite(name: str, python: str, args: list[str], passes: list[Pass]) -> bool:
    """Run one suite's passes, appending them to ``passes``; False if the run must stop."""
    pytest = [python, "-m", "pytest"]
    if sys.stdout.isatty() and not any(a.startswith("--color") for a in args):
        # pytest writes to a pipe here; keep colours when a person is watching.
        pytest.append("--color=yes")
    with tempfile.TemporaryDirectory() as tmp:
        count_file = Path(tmp) / "solo-count"
        env = {**os.environ, "DBQUEUE_SOLO_COUNT_FILE": str(count_file)}
        parallel = [*pytest, "-n", "auto", "--dist", "loadgroup", "--solo=exclude", *args]
        if not _run_pass(f"{name}, parallel", parallel, env, passes):
            return False
        solo = count_file.read_text().strip() if count_file.exists() else ""
    if solo == "0":
        print(f"run_tests: {name}: no solo test in this selection: no solo pass", flush=True)
        return True
    # "-n 0" last: it overrides a "-n" among the extra arguments.
    return _run_pass(f"{name}, solo", [*pytest, "--solo=only", *args, "-n", "0"], env, passes)


def _run_pass(label: str, cmd: list[str], env: dict[str, str], passes: list[Pass]) -> bool:
    rc, text = run(cmd, env)
    passes.append(Pass(label, rc, Totals.parse(text)))
    # 0: passed; 1: some test failed (go on, the other passes still tell something);
    # 5: nothing collected (counted below). Anything else is pytest itself failing.
    return rc in (0, TESTS_FAILED, NO_TESTS_COLLECTED)


def last_line(total: Totals, seconds: float) -> str:
    """The log's last line: ``N passed, N failed, N skipped in T s``, all passes summed."""
    return (
        f"{total.get('passed')} passed, {total.failed} failed, {total.get('skipped')} skipped "
        f"in {seconds:.0f} s"
    )


def report(passes: list[Pass], seconds: float) -> int:
    """Print each pass's result and the total of a run that took ``seconds``; the exit code of
    the whole run."""
    total = Totals()
    for p in passes:
        if p.totals is not None:
            total.add(p.totals)
        outcome = p.totals.describe() if p.totals is not None else "no summary"
        print(f"run_tests: {p.label}: {outcome} (exit code {p.rc})", flush=True)
    crashed = [p for p in passes if p.rc not in (0, TESTS_FAILED, NO_TESTS_COLLECTED)]
    rc = 0
    if crashed or total.failed or any(p.rc == TESTS_FAILED for p in passes):
        rc = 1
    elif total.get("passed") == 0:
        print(
            "run_tests: no test passed (nothing collected, or everything skipped or "
            "deselected): this is a failure",
            flush=True,
        )
        rc = 1
    print(f"run_tests: total over {len(passes)} pass(es): {total.describe()}", flush=True)
    # The last line, which CI reads: failed counts errors too.
    print(last_line(total, seconds), flush=True)
    return rc


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--also",
        nargs=2,
        action="append",
        default=[],
        metavar=("SUITE", "PYTHON"),
        help=f"run an extra suite ({', '.join(SUITES)}) with that interpreter",
    )
    parser.add_argument("--no-main", action="store_true", help="run only the --also suites")
    options, args = parser.parse_known_args(argv)
    suites: list[tuple[str, str, list[str]]] = []
    if not options.no_main:
        suites.append(("main", sys.executable, args))
    for name, python in options.also:
        if name not in SUITES:
            parser.error(f"unknown suite {name!r}; known: {', '.join(SUITES)}")
        suites.append((name, python, [*SUITES[name], *args]))
    passes: list[Pass] = []
    started = time.monotonic()
    for name, python, suite_args in suites:
        if not run_suite(name, python, suite_args, passes):
            break
    return report(passes, time.monotonic() - started)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
