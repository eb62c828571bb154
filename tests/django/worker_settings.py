"""Settings of the ``runqueueworker`` processes the tests start: the test settings, pointed at
the test databases of the run that started them (``DBQUEUE_WORKER_DATABASES``, a JSON object
of alias -> database name), and for the aliases in ``DBQUEUE_WORKER_SERVERS`` (a JSON object
of alias -> [host, port], optional) on another server address: a test's proxy
(tests/proxy.py)."""

import json
import os

from tests.django.settings import *  # noqa: F403
from tests.django.settings import DATABASES as _TEST_DATABASES

DATABASES = {
    alias: {**_TEST_DATABASES[alias], "NAME": name}
    for alias, name in json.loads(os.environ["DBQUEUE_WORKER_DATABASES"]).items()
}
for _alias, (_host, _port) in json.loads(os.environ.get("DBQUEUE_WORKER_SERVERS", "{}")).items():
    DATABASES[_alias] = {**DATABASES[_alias], "HOST": _host, "PORT": str(_port)}
LOGGING_CONFIG = None
