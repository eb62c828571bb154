"""Durations as the Django front takes them, in settings and in management commands.

A duration is whole numbers each followed by a unit, ``s``, ``m``, ``h``, ``d`` or ``w``:
``"90s"``, ``"30m"``, ``"12h"``, ``"7d"``, ``"2w"``; parts add up (``"1d12h"``). The syntax is
the core's (:func:`dbqueue.commandline.duration`), so ``manage.py`` and the ``dbqueue`` command
line read the same text. Each reader below turns a bad value into the error its caller reports:

* :func:`add_older_than_argument` and :func:`duration_option`: a command's ``--older-than
  DURATION``; a bad value ends the command with a one-line :class:`CommandError`.
* :func:`duration_setting`: a setting that holds a duration, as a string like the above or as
  a :class:`datetime.timedelta`; a bad one raises :class:`ImproperlyConfigured`.
"""

from __future__ import annotations

import argparse
from datetime import timedelta

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError

from dbqueue.commandline import duration

__all__ = ["add_older_than_argument", "duration_option", "duration_setting", "parse_duration"]

#: How a help text names the accepted durations.
EXAMPLES = "90s, 30m, 12h, 7d, 2w"


def parse_duration(text: object) -> timedelta:
    """The positive duration ``text`` says; ValueError saying what is wrong otherwise (a
    number, too: seconds or days, it would be a guess)."""
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not a duration: write it as a string, e.g. {EXAMPLES}")
    try:
        return duration(text)
    except argparse.ArgumentTypeError as exc:
        raise ValueError(str(exc)) from None


def add_older_than_argument(parser: argparse.ArgumentParser, *, what: str) -> None:
    """Add the required ``--older-than DURATION`` option; ``what`` completes its help ("delete
    the results of tasks that finished longer ago than this"). Read it with
    :func:`duration_option`."""
    parser.add_argument(
        "--older-than",
        required=True,
        metavar="DURATION",
        help=f"{what}: {EXAMPLES}",
    )


def duration_option(text: str, *, option: str = "--older-than") -> timedelta:
    """The duration a command's ``option`` was given; a one-line CommandError if it is bad."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise CommandError(f"{option}: {exc}") from None


def duration_setting(value: object, *, setting: str) -> timedelta:
    """The duration a setting holds (a string as above, or a positive timedelta);
    ImproperlyConfigured naming ``setting`` if it is anything else."""
    if isinstance(value, timedelta):
        if value > timedelta(0):
            return value
        raise ImproperlyConfigured(f"{setting} must be a positive duration, got {value!r}")
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{setting}: {exc}") from None
