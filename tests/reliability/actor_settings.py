"""Settings of the Django processes the reliability tests start against a database of their own
(:mod:`tests.reliability.actors`): the test app's queues on ``DBQUEUE_ACTOR_DSN``.

``DBQUEUE_ACTOR_ISOLATION=repeatable_read`` sets the connection's isolation level with Django's
option (``OPTIONS["isolation_level"]``): every transaction Django begins on it (``atomic()``)
is REPEATABLE READ; statements outside one keep the server's default.
"""

import os

import psycopg

from tests.pg import django_database

SECRET_KEY = "dbqueue-reliability-tests-only"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {"default": django_database(os.environ["DBQUEUE_ACTOR_DSN"])}
if os.environ.get("DBQUEUE_ACTOR_ISOLATION") == "repeatable_read":
    DATABASES["default"]["OPTIONS"] = {"isolation_level": psycopg.IsolationLevel.REPEATABLE_READ}
INSTALLED_APPS = ["django.contrib.contenttypes", "dbqueue_django", "tests.django.testapp"]
LOGGING_CONFIG = None
