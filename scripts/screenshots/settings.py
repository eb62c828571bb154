"""The example shop, for the admin screenshots only: every request is logged in as the
superuser "admin" (headless Chromium cannot fill in the login form)."""

from shopsite.settings import *  # noqa: F403

MIDDLEWARE = [*MIDDLEWARE, "screenshots.autologin.LogInAsAdmin"]  # noqa: F405
DEBUG = False
