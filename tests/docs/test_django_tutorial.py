"""docs/tutorial/django.md, run end to end in an empty directory as a reader runs it: the
project created with ``django-admin``, the files written, every command and snippet run in
real processes, the worker in the background where the page starts it. On SQLite, as the page
says, and again on PostgreSQL, as its last section says works unchanged: there the test
points the new project's settings at a database of its own right after ``startproject``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import scratch_database
from tests.docs.tutorial import DOCS, Tutorial, blocks, environment
from tests.pg import django_database

pytestmark = [pytest.mark.django, pytest.mark.slow]
PAGE = DOCS / "tutorial" / "django.md"


class OnDatabase(Tutorial):
    """The tutorial with ``settings`` appended to the project's settings once
    ``startproject`` wrote them."""

    settings = ""

    def command(self, argv: list[str], *, background: bool = False) -> str:
        output = super().command(argv, background=background)
        if argv[:2] == ["django-admin", "startproject"] and self.settings:
            self.write("mysite/settings.py", self.settings, append=True)
        return output


@pytest.fixture(
    params=[
        pytest.param("sqlite", marks=pytest.mark.sqlite),
        pytest.param("postgresql", marks=pytest.mark.postgresql),
    ]
)
def settings(request: pytest.FixtureRequest) -> Iterator[str]:
    """What the test adds to the project's settings: nothing on SQLite (startproject's own
    default), a PostgreSQL database of this test's own otherwise."""
    if request.param == "sqlite":
        yield ""
        return
    with scratch_database("dbqueue_tutorial") as dsn:
        yield f"DATABASES = {{'default': {django_database(dsn)!r}}}\n"


def shell(tutorial: Tutorial, code: str) -> None:
    """A snippet, run in ``manage.py shell`` as the page tells the reader."""
    done = tutorial.process([sys.executable, "manage.py", "shell", "--no-imports", "-c", code])
    if done.returncode != 0:
        raise AssertionError(f"manage.py shell exited {done.returncode}:\n{code}\n{done.stderr}")


def test_the_django_tutorial_runs_as_written(tmp_path: Path, settings: str) -> None:
    tutorial = OnDatabase(tmp_path, environment(), shell)
    tutorial.settings = settings
    tutorial.run(PAGE)
    # On PostgreSQL, nothing may have gone to startproject's SQLite file.
    assert (tmp_path / "db.sqlite3").exists() == (not settings)


def test_every_block_of_the_tutorial_is_run_or_says_why_not() -> None:
    found = blocks(PAGE)
    skipped = [b.line for b in found if b.has("skip")]
    # createsuperuser and runserver (interactive), and the PostgreSQL settings.
    assert len(skipped) == 2, skipped
    assert {b.lang for b in found} == {"sh", "python"}
