"""scripts/run_tests.py: the totals it reads from pytest's output, and the line it ends on."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "run_tests.py"


@pytest.fixture(scope="module")
def run_tests() -> ModuleType:
    spec = importlib.util.spec_from_file_location("run_tests", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # dataclasses look their module up in sys.modules while the class is built.
    sys.modules["run_tests"] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["run_tests"]
    return module


def test_the_totals_are_read_from_the_last_summary_line(run_tests: ModuleType) -> None:
    text = (
        "==== 3 passed in 1.00s ====\n"
        "\x1b[32m==== 850 passed, 1 failed, 2 errors, 4 skipped, 2 warnings in 151.38s ===="
        "\x1b[0m\n"
    )
    totals = run_tests.Totals.parse(run_tests.ANSI.sub("", text))
    assert totals.counts == {"passed": 850, "failed": 1, "errors": 2, "skipped": 4}
    assert totals.failed == 3


def test_a_run_ends_on_its_summed_total(
    run_tests: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    passes = [
        run_tests.Pass("main", 0, run_tests.Totals({"passed": 7000, "skipped": 3})),
        run_tests.Pass("main, solo", 0, run_tests.Totals({"passed": 12})),
        run_tests.Pass("django52", 0, run_tests.Totals({"passed": 150, "skipped": 1})),
    ]
    assert run_tests.report(passes, 1234.4) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "7162 passed, 0 failed, 4 skipped in 1234 s"


def test_a_failed_test_or_an_error_fails_the_run(
    run_tests: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    passes = [
        run_tests.Pass("main", 1, run_tests.Totals({"passed": 10, "failed": 1})),
        run_tests.Pass("main, solo", 1, run_tests.Totals({"passed": 2, "errors": 1})),
    ]
    assert run_tests.report(passes, 5) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "12 passed, 2 failed, 0 skipped in 5 s"


def test_a_run_in_which_no_test_passed_is_a_failure(
    run_tests: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    passes = [run_tests.Pass("main", 5, run_tests.Totals({"skipped": 40}))]
    assert run_tests.report(passes, 2) == 1
    out = capsys.readouterr().out.splitlines()
    assert "no test passed" in out[-3]
    assert out[-1] == "0 passed, 0 failed, 40 skipped in 2 s"


def test_a_crashed_pass_fails_the_run(
    run_tests: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    passes = [run_tests.Pass("main", 3, None)]
    assert run_tests.report(passes, 1) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "run_tests: main: no summary (exit code 3)"
    assert out[-1] == "0 passed, 0 failed, 0 skipped in 1 s"
