"""``manage.py prunetasks``: what it deletes, its confirmation, and its errors."""

from __future__ import annotations

import datetime as dt
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from dbqueue_django.models import TaskItem, TaskRun
from tests.django import task_rows

pytestmark = [pytest.mark.django, pytest.mark.django_db(databases=["default", "sqlite"])]

ROOT = Path(__file__).resolve().parents[2]
WEEK = dt.timedelta(days=7)


def prunetasks(*args: str) -> str:
    out = io.StringIO()
    call_command("prunetasks", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_it_deletes_what_finished_before_the_age(alias: str) -> None:
    task_rows.result(alias, "SUCCESSFUL", 2 * WEEK)
    task_rows.failed_task(alias, 2 * WEEK)
    recent = task_rows.result(alias, "SUCCESSFUL", dt.timedelta(hours=1)).pk
    out = prunetasks("--older-than", "7d", "--database", alias, "--noinput")
    assert out.startswith("Deleted 2 task result(s) and 1 failed task(s) that finished before ")
    assert list(TaskRun.objects.using(alias).values_list("pk", flat=True)) == [recent]
    assert not TaskItem.objects.using(alias).exists()


@pytest.mark.parametrize(("answer", "kept"), [("yes", 0), ("no", 1), ("", 1)])
def test_it_asks_first(alias: str, monkeypatch: pytest.MonkeyPatch, answer: str, kept: int) -> None:
    task_rows.result(alias, "SUCCESSFUL", 2 * WEEK)
    asked: list[str] = []
    monkeypatch.setattr("builtins.input", lambda prompt: asked.append(prompt) or answer)
    out = prunetasks("--older-than", "1w", "--database", alias)
    (prompt,) = asked
    assert prompt.startswith("This deletes 1 task result(s) and 0 failed task(s) that finished")
    assert f"from the database {alias!r}" in prompt
    assert TaskRun.objects.using(alias).count() == kept
    assert out.startswith("Deleted" if answer == "yes" else "Cancelled: nothing deleted.")


@pytest.mark.postgresql
def test_nothing_to_delete_asks_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    task_rows.result("default", "SUCCESSFUL", dt.timedelta(hours=1))
    monkeypatch.setattr("builtins.input", lambda prompt: pytest.fail("asked"))
    assert prunetasks("--older-than", "12h").startswith("No task finished before ")
    assert TaskRun.objects.count() == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--older-than", "7x"], "--older-than: '7x' is not a duration: write a whole number"),
        (["--older-than", "0s"], "--older-than: the duration must be more than 0"),
        (["--older-than", "7d", "--database", "nope"], "--database: 'nope' is not a database"),
        ([], "the following arguments are required: --older-than"),
    ],
)
def test_bad_input_is_refused(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        prunetasks(*args, "--noinput")


def test_a_bad_duration_is_one_line_on_the_command_line() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.django.settings", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "django", "prunetasks", "--older-than", "soon", "--noinput"],
        env=env, cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "CommandError: --older-than: 'soon' is not a duration: write a whole number followed by "
        "s, m, h, d or w (seconds, minutes, hours, days, weeks), e.g. 90s, 30m, 12h, 7d, 2w"
    ]
