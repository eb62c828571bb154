"""Error texts made storable: escapes for what no text column takes, a cap with a marker."""

from __future__ import annotations

from dbqueue.error_text import MAX_ERROR_CHARS, storable_error


def test_an_ordinary_text_is_kept_as_it_is() -> None:
    text = 'Traceback (most recent call last):\n  ValueError: "é" ✓'
    assert storable_error(text) is text


def test_nul_and_lone_surrogates_become_visible_escapes() -> None:
    assert storable_error("a\x00b") == "a\\x00b"
    assert storable_error("a\ud800b\udfffc") == "a\\ud800b\\udfffc"
    storable_error("a\ud800\x00").encode("utf-8")  # encodable, nothing left to refuse


def test_a_long_text_keeps_its_head_and_tail_and_says_what_was_cut() -> None:
    text = "HEAD" + "x" * 200 + "TAIL"
    cut = storable_error(text, limit=100)
    assert len(cut) <= 100
    assert cut.startswith("HEAD") and cut.endswith("TAIL")
    shown = int(cut.split("[... ")[1].split(" ")[0])
    assert len(cut) - len(cut.split("\n")[1]) - 2 + shown == len(text)


def test_the_default_cap() -> None:
    assert len(storable_error("y" * (MAX_ERROR_CHARS * 2))) <= MAX_ERROR_CHARS
    assert storable_error("y" * MAX_ERROR_CHARS) == "y" * MAX_ERROR_CHARS


def test_a_limit_too_small_for_the_marker_just_truncates() -> None:
    assert storable_error("z" * 50, limit=10) == "z" * 10
