"""Argument types the command lines share (dbqueue.commandline)."""

from __future__ import annotations

import argparse
from datetime import timedelta

import pytest

from dbqueue.commandline import duration, render_table, stats_json


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("30m", timedelta(minutes=30)),
        ("12h", timedelta(hours=12)),
        ("7d", timedelta(days=7)),
        ("2w", timedelta(weeks=2)),
        ("1d12h", timedelta(days=1, hours=12)),
        (" 7D ", timedelta(days=7)),
    ],
)
def test_durations(text: str, expected: timedelta) -> None:
    assert duration(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("7", "'7' is not a duration: write a whole number followed by s, m, h, d or w"),
        ("7x", "'7x' is not a duration"),
        ("1.5d", "'1.5d' is not a duration"),
        ("-7d", "'-7d' is not a duration"),
        ("d", "'d' is not a duration"),
        ("", "'' is not a duration"),
        ("0d", "the duration must be more than 0, got '0d'"),
        ("0s0m", "the duration must be more than 0"),
        ("99999999999w", "the duration '99999999999w' is too long"),
    ],
)
def test_bad_durations_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as error:
        duration(text)
    assert str(error.value).startswith(message)


def test_stats_as_json_values() -> None:
    split = {"ready": 1, "oldest_ready_age": timedelta(seconds=2.5)}
    assert stats_json(split) == {
        "capacity": None,
        "occupancy": None,
        "ready": 1,
        "oldest_ready_age": 2.5,
    }
    ring = {"ready": 0, "oldest_ready_age": None, "capacity": 8, "occupancy": 0.25}
    assert stats_json(ring) == ring


def test_tables_align_names_left_and_numbers_right() -> None:
    table = render_table(("queue", "layout", "ready"), [["a_long_name", "ring", "1,234"]])
    assert table.splitlines() == [
        "queue        layout  ready",
        "a_long_name  ring    1,234",
    ]
    table = render_table(("queue", "layout", "ready"), [["q", "split", "7"]], left=1)
    assert table.splitlines() == ["queue  layout  ready", "q       split      7"]
