"""Management commands run as real processes (``python -m django <command>``) on this test
run's databases, the way a deployment runs them: what they print, how they exit, and that an
error is one line, without a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from django.db import connections

from tests.processes import PATIENCE, ROOT, run_process, start_process, wait_for

__all__ = [
    "PATIENCE",
    "ROOT",
    "assert_one_line_error",
    "command_args",
    "command_env",
    "run_command",
    "start_command",
    "wait_for",
]


def command_env(settings: str = "tests.django.worker_settings") -> dict[str, str]:
    """The environment of a command process: ``settings`` (by default the test settings,
    pointed at this run's test databases), and the repository importable."""
    names = {a: connections[a].settings_dict["NAME"] for a in ("default", "sqlite")}
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": settings,
        "DBQUEUE_WORKER_DATABASES": json.dumps(names),
        "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }


def command_args(*args: str) -> list[str]:
    return [sys.executable, "-m", "django", *args]


def run_command(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """Run ``manage.py ARGS`` to completion."""
    return run_process(command_args(*args), command_env(), stdin)


def start_command(*args: str, log: Path, **popen: Any) -> subprocess.Popen[bytes]:
    """Start ``manage.py ARGS`` in the background, its output going to ``log``."""
    env = popen.pop("env", None) or command_env()
    return start_process(command_args(*args), env, log, **popen)


def assert_one_line_error(done: subprocess.CompletedProcess[str], message: str) -> None:
    """``done`` failed with ``message`` on its last line of stderr, and no traceback."""
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert message in last, done.stderr
