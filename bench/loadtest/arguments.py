"""The load test's command-line values, checked (argparse types)."""

from __future__ import annotations

import argparse


def conn_max_age(value: str) -> int | None:
    """``CONN_MAX_AGE``: seconds >= 0, or ``none``."""
    if value.lower() == "none":
        return None
    seconds = int(value)
    if seconds < 0:
        raise argparse.ArgumentTypeError("CONN_MAX_AGE is seconds >= 0, or none")
    return seconds


def positive(value: str) -> int:
    """A count >= 1."""
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a count >= 1, got {value}")
    return n
