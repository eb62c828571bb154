"""Commands run as real processes by the tests (``dbqueue``, ``manage.py ...``): to
completion, or in the background with their output in a log, and polling for what they do."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: Seconds to wait for something that normally takes a moment (a hang guard, not a threshold).
PATIENCE = 60.0


def run_process(
    args: list[str],
    env: dict[str, str],
    stdin: str = "",
    *,
    cwd: Path = ROOT,
    timeout: float = PATIENCE,
) -> subprocess.CompletedProcess[str]:
    """Run ``args`` in ``cwd`` (the repository's root) to completion, capturing its output."""
    return subprocess.run(
        args,
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start_process(
    args: list[str], env: dict[str, str], log: Path, **popen: Any
) -> subprocess.Popen[bytes]:
    """Start ``args`` from the repository's root in the background, its stdout and stderr
    going to ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, **popen
        )


def wait_for(condition: Callable[[], bool], what: str, log: Path | None = None) -> None:
    """Poll ``condition`` until it holds; fail after PATIENCE (showing ``log``, if given)."""
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            detail = f"\n--- log ---\n{log.read_text()}" if log is not None else ""
            raise AssertionError(f"timed out waiting until {what}{detail}")
        time.sleep(0.05)
