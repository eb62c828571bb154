"""Headless Chromium for the browser tests: Debian's ``chromium`` (``make browser`` installs
it), driven by Playwright, whose own browser download is not used.

Without Chromium or Playwright a browser test is skipped on a developer's machine, with what
to install; under CI (``CI`` set, as ``.ci/run`` runs) it fails instead, so a green run always
means the pages were looked at.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

#: Where Debian installs it (``apt-get install chromium``).
CHROMIUM = "/usr/bin/chromium"
#: The window every browser test uses: the narrowest the admin is made to fit.
WIDTH, HEIGHT = 1280, 800


def missing() -> str | None:
    """What is missing to run a browser test, or None."""
    if not (os.access(CHROMIUM, os.X_OK) or shutil.which("chromium")):
        return f"Chromium is not installed ({CHROMIUM}): run `make browser`"
    if importlib.util.find_spec("playwright") is None:
        return "Playwright is not installed: run `make venv` (it is in the dev extra)"
    return None


def require_browser() -> None:
    """Skip the test if Chromium or Playwright is missing, or fail it under CI."""
    reason = missing()
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"browser test under CI: {reason}", pytrace=False)
    pytest.skip(reason)


def visit(base_url: str, cookies: dict[str, str], paths: list[str], script: str) -> dict[str, Any]:
    """Open each of ``paths`` on ``base_url`` in a new 1280x800 window holding ``cookies``,
    and run ``script`` (a JavaScript function) there: its result per path, or the HTTP
    status when the page did not answer 200.

    Playwright's synchronous API runs an event loop in the thread that drives it, where
    Django then refuses every query: so the browser runs in a thread of its own.
    """
    require_browser()
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(_visit, base_url, cookies, paths, script).result()


def _visit(base_url: str, cookies: dict[str, str], paths: list[str], script: str) -> Any:
    from playwright.sync_api import sync_playwright

    executable = CHROMIUM if os.access(CHROMIUM, os.X_OK) else shutil.which("chromium")
    results: dict[str, Any] = {}
    with sync_playwright() as playwright:
        # --no-sandbox: CI and the developers' machines run as root, where Chromium's own
        # sandbox refuses to start.
        chromium = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            context = chromium.new_context(viewport={"width": WIDTH, "height": HEIGHT})
            context.add_cookies(
                [{"name": k, "value": v, "url": base_url} for k, v in cookies.items()]
            )
            page = context.new_page()
            for path in paths:
                response = page.goto(base_url + path)
                status = response.status if response is not None else None
                results[path] = page.evaluate(script) if status == 200 else status
        finally:
            chromium.close()
    return results
