"""The test settings as mypy's Django plugin loads them: without starting a PostgreSQL server.

The plugin only imports the settings (nothing connects), and it can exit without running
atexit handlers, so an embedded server started here would outlive it.
"""

import os

os.environ.setdefault("DBQUEUE_TEST_DSN", "postgresql://typecheck@localhost/typecheck")

from tests.django.settings import *  # noqa: F403
