"""Durations in settings and command options (dbqueue_django.durations)."""

from __future__ import annotations

import argparse
import re
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError

from dbqueue_django.durations import (
    add_older_than_argument,
    duration_option,
    duration_setting,
    parse_duration,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("90s", timedelta(seconds=90)), ("30m", timedelta(minutes=30)), ("12h", timedelta(hours=12)),
     ("7d", timedelta(days=7)), ("2w", timedelta(weeks=2)), ("1d12h", timedelta(hours=36))],
)  # fmt: skip
def test_durations(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected
    assert duration_option(text) == expected
    assert duration_setting(text, setting="X") == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("7", "'7' is not a duration: write a whole number followed by s, m, h, d or w"),
        ("7 days", "'7 days' is not a duration"),
        ("0d", "the duration must be more than 0"),
        (7, "7 is not a duration: write it as a string, e.g. 90s, 30m, 12h, 7d, 2w"),
        (None, "None is not a duration"),
    ],
)
def test_a_bad_duration_says_what_is_wrong(value: object, message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        parse_duration(value)


def test_a_bad_option_is_a_one_line_command_error() -> None:
    with pytest.raises(CommandError) as error:
        duration_option("7x", option="--older-than")
    assert str(error.value).startswith("--older-than: '7x' is not a duration")
    assert "\n" not in str(error.value)


def test_the_option_is_required_and_names_the_syntax() -> None:
    parser = argparse.ArgumentParser()
    add_older_than_argument(parser, what="delete what finished longer ago than this")
    assert parser.parse_args(["--older-than", "7d"]).older_than == "7d"
    (action,) = [a for a in parser._actions if a.dest == "older_than"]
    assert action.required
    assert action.help == "delete what finished longer ago than this: 90s, 30m, 12h, 7d, 2w"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("soon", "RETENTION: 'soon' is not a duration"),
        (timedelta(0), "RETENTION must be a positive duration, got datetime.timedelta(0)"),
        (30, "RETENTION: 30 is not a duration"),
    ],
)
def test_a_bad_setting_is_improperly_configured(value: object, message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="^" + re.escape(message)):
        duration_setting(value, setting="RETENTION")


def test_a_timedelta_setting_is_taken_as_it_is() -> None:
    assert duration_setting(timedelta(days=3), setting="X") == timedelta(days=3)
