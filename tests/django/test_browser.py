"""What a browser test does without Chromium: skipped on a developer's machine with what to
install, failed under CI, where a green run must mean the pages were looked at."""

from __future__ import annotations

import pytest

from tests.django import browser


def test_a_missing_chromium_fails_under_ci_and_is_skipped_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(browser, "CHROMIUM", "/nonexistent/chromium")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="make browser"):
        browser.require_browser()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="make browser"):
        browser.require_browser()
