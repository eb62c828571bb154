"""The example shop's settings (``shopsite.settings``, from the example's directory), plus what
the load test reads back: each failed request as one line on stderr
(:mod:`bench.loadtest.server_log`), and every e-mail sent written to a file under
``LOADTEST_OUTBOX``, so an e-mail sent twice is seen even if the database never learned of it.
"""

import importlib
import os

from bench.loadtest.server_log import logging_config

_shop = importlib.import_module("shopsite.settings")
globals().update({name: value for name, value in vars(_shop).items() if name.isupper()})

LOGGING = logging_config(getattr(_shop, "LOGGING", None))
if os.environ.get("LOADTEST_OUTBOX"):
    EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    EMAIL_FILE_PATH = os.environ["LOADTEST_OUTBOX"]
