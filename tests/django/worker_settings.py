"""Settings of the ``runqueueworker`` processes the tests start: the test settings, pointed at
the test databases of the run that started them (``DBQUEUE_WORKER_DATABASES``, a JSON object
of alias -> database name)."""

import json
import os

from tests.django.settings import *  # noqa: F403
from tests.django.settings import DATABASES as _TEST_DATABASES

DATABASES = {
    alias: {**_TEST_DATABASES[alias], "NAME": name}
    for alias, name in json.loads(os.environ["DBQUEUE_WORKER_DATABASES"]).items()
}
LOGGING_CONFIG = None
