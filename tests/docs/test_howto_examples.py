"""The runnable examples of the how-to pages run as printed, and print what the pages say
they print (the comment after each print)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

HOWTO = Path(__file__).resolve().parents[2] / "docs" / "howto"
#: The runnable examples: a page, and which of its Python blocks (from 0).
EXAMPLES = [("cancellation.md", 0), ("fanout.md", 0), ("fanout.md", 1), ("unique.md", 0)]

pytestmark = pytest.mark.sqlite


@pytest.mark.parametrize(("page", "block"), EXAMPLES)
def test_the_runnable_example_runs_as_printed(page: str, block: int) -> None:
    path = HOWTO / page
    text = path.read_text("utf-8")
    example = re.findall(r"```python\n(.*?)```", text, re.S)[block]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(example, str(path), "exec"), {})  # the page is ours
    promised = re.findall(r"print\(.*\)  # (.*)", example)
    assert out.getvalue().splitlines() == promised
