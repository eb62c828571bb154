"""Settings of the crash tests' worker processes: the crash app on ``DBQUEUE_CRASH_DSN``."""

import os

from tests.pg import django_database

SECRET_KEY = "dbqueue-crash-tests-only"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {"default": django_database(os.environ["DBQUEUE_CRASH_DSN"])}
INSTALLED_APPS = ["django.contrib.contenttypes", "dbqueue_django", "tests.reliability.crashapp"]
LOGGING_CONFIG = None
