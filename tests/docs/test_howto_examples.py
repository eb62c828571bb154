"""The runnable example of docs/howto/cancellation.md runs as printed, and prints what the
page says it prints."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "howto" / "cancellation.md"

pytestmark = pytest.mark.sqlite


def test_the_runnable_example_runs_as_printed() -> None:
    text = PAGE.read_text("utf-8")
    example = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(example, str(PAGE), "exec"), {})  # the page is ours
    promised = re.findall(r"print\(.*\)  # (.*)", example)
    assert out.getvalue().splitlines() == promised
