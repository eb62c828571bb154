"""Reading the exception class out of a stored error: tracebacks as workers store them, texts
code wrote itself, and the pattern the admin's filter runs in the database."""

from __future__ import annotations

import re

import pytest

from dbqueue_django.error_classes import class_line_pattern, error_class, is_class_name
from tests.django.tracebacks import chained, stored


class MultiLineError(Exception):
    """An exception outside the builtins, whose message runs over several lines."""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (stored(ValueError("bad")), "ValueError"),
        (stored(ValueError()), "ValueError"),  # no message: the name alone
        (stored(MultiLineError("one\nTwo: lines")), f"{__name__}.MultiLineError"),
        (chained(KeyError("key"), ValueError("while handling it")), "ValueError"),
        # The last traceback's class, not its context's.
        (chained(KeyError("key"), ConnectionError("reconnect"), explicit=False), "ConnectionError"),
        ("Traceback ...\nValueError: <b>bad</b>", "ValueError"),
        ("gave up: the address bounced", None),  # a sentence, not a class name
        ("TimeoutError: no answer after 30 s", "TimeoutError"),
        ("", None),
        (None, None),
    ],
)
def test_the_class_an_error_names(text: str | None, expected: str | None) -> None:
    assert error_class(text) == expected


@pytest.mark.parametrize("name", ["ValueError", "shop.mail.SmtpDown", "_Private"])
def test_class_names(name: str) -> None:
    assert is_class_name(name)


@pytest.mark.parametrize("name", ["", ".*", "a b", "x.", "1Error", "Value|Key"])
def test_what_is_no_class_name(name: str) -> None:
    assert not is_class_name(name)
    with pytest.raises(ValueError, match="not a class name"):
        class_line_pattern(name)


def test_the_pattern_finds_a_line_naming_the_class() -> None:
    pattern = re.compile(class_line_pattern("ValueError"))
    assert pattern.search(stored(ValueError("bad")))
    assert pattern.search(chained(KeyError("key"), ValueError("while handling it")))
    assert not pattern.search(stored(KeyError("ValueError: only in the message")))
    assert not pattern.search("ValueErrors: not this class")
    dotted = re.compile(class_line_pattern("shop.SmtpDown"))
    assert dotted.search("Traceback ...\nshop.SmtpDown: later")
    assert not dotted.search("Traceback ...\nshopXSmtpDown: later")  # the dot is a dot
