"""The harness's environment helpers: a child process gets its DSN, password included,
through the environment, never on a command line that ``ps`` shows."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from bench import workloads
from bench.env import DSN_VAR, libpq_environ

DSN = "postgresql://bench:s3cret@db.example:6543/queues?sslmode=disable"


def test_libpq_programs_get_the_dsn_as_pg_variables() -> None:
    env = libpq_environ(DSN, {"PATH": "/bin"})
    assert env == {
        "PATH": "/bin", "PGHOST": "db.example", "PGPORT": "6543", "PGUSER": "bench",
        "PGPASSWORD": "s3cret", "PGDATABASE": "queues", "PGSSLMODE": "disable",
    }  # fmt: skip


def test_worker_processes_get_the_dsn_through_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[dict[str, Any]] = []

    class Spawned(Exception):
        pass

    def popen(args: list[str], **kwargs: Any) -> None:
        started.append({"args": args, **kwargs})
        raise Spawned

    class System:
        name, dsn = "naive", DSN

    monkeypatch.setattr(subprocess, "Popen", popen)
    with pytest.raises(Spawned):
        workloads._processes(System(), [("cycle", 100, 1.0, 1)])  # type: ignore[arg-type]
    (call,) = started
    assert not any("s3cret" in arg for arg in call["args"])
    assert call["env"][DSN_VAR] == DSN
