"""PostgreSQL's client programs (``pg_dump``, ``pg_restore``...) of the release a server runs.

A machine may hold several: the distribution's (``/usr/lib/postgresql/<major>/bin``, with
Debian's wrapper on PATH) and the embedded server's (the ``pgserver`` wheel's
``pginstall/bin``). ``pg_dump`` refuses a server newer than itself, and one older than the
server it dumps is not what a deployment would run: :func:`pg_program` picks the one whose major
version is the server's (``SHOW server_version_num``).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

import psycopg

#: Where a directory of PostgreSQL programs may be named by hand.
BIN_VAR = "DBQUEUE_PG_BIN"


def server_major(dsn: str) -> int:
    """The major version of the server of ``dsn`` (16 for 16.2)."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        row = conn.execute("SHOW server_version_num").fetchone()
    assert row is not None
    return int(row[0]) // 10000


@functools.cache
def program_major(path: Path) -> int | None:
    """The major version of the PostgreSQL program at ``path`` (its ``--version``), or None if
    it does not run."""
    try:
        out = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, timeout=30, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"\(PostgreSQL\) (\d+)", out.stdout)
    return int(found.group(1)) if found else None


def candidate_dirs() -> list[Path]:
    """Directories that may hold PostgreSQL's programs, the most specific first: ``$BIN_VAR``,
    ``pg_config --bindir``, each ``/usr/lib/postgresql/<major>/bin``, the embedded server's,
    then PATH's."""
    dirs: list[Path] = []
    if os.environ.get(BIN_VAR):
        dirs.append(Path(os.environ[BIN_VAR]))
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=False)
        if out.stdout.strip():
            dirs.append(Path(out.stdout.strip()))
    dirs.extend(sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True))
    try:
        import pgserver
    except ImportError:
        pass
    else:
        dirs.append(Path(pgserver.__file__).parent / "pginstall" / "bin")
    dirs.extend(Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p)
    unique: list[Path] = []
    for d in dirs:
        if d not in unique:
            unique.append(d)
    return unique


def pg_program(name: str, dsn: str) -> Path:
    """The program ``name`` (``pg_dump``, ``pg_restore``...) of the major version the server of
    ``dsn`` runs; RuntimeError if no directory of :func:`candidate_dirs` has it."""
    major = server_major(dsn)
    seen: list[str] = []
    for directory in candidate_dirs():
        path = directory / name
        if not path.is_file():
            continue
        found = program_major(path)
        if found == major:
            return path
        seen.append(f"{path} ({found})")
    raise RuntimeError(
        f"no {name} of PostgreSQL {major}, the server's, among {', '.join(seen) or 'none'}: "
        f"set {BIN_VAR} to its directory"
    )
