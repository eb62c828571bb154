"""Django settings for the test suite: PostgreSQL as ``default``, SQLite (a temporary file,
so a second connection sees the rows) as ``sqlite``."""

import importlib.util
import os
import tempfile

from tests.pg import django_database, server_dsn, worker_id

SECRET_KEY = "dbqueue-tests-only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "tests.django.urls"
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

_sqlite = os.path.join(tempfile.gettempdir(), f"dbqueue-test-{os.getpid()}-{worker_id()}.sqlite3")

# A test database name of this process's own: several runs (and xdist workers) can share one
# server without dropping each other's databases.
_default = django_database(server_dsn())
_default["TEST"] = {"NAME": f"test_dbqueue_{os.getpid()}"}

DATABASES = {
    "default": _default,
    "sqlite": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": _sqlite,
        "OPTIONS": {"timeout": 30, "transaction_mode": "IMMEDIATE"},
        # Made without PostgreSQL's: the browser tests need SQLite alone.
        "TEST": {"NAME": _sqlite + ".test", "DEPENDENCIES": []},
    },
}

INSTALLED_APPS = [
    # The test suite's flush command, in place of Django's (cheaper between tests).
    "tests.django.flushing",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    # The live server of the browser tests serves the admin's stylesheets through it.
    "django.contrib.staticfiles",
    "dbqueue_django",
    "tests.django.testapp",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

# Django 6's Tasks framework, on dbqueue (Django 5.2 has no django.tasks).
if importlib.util.find_spec("django.tasks") is not None:
    TASKS = {
        "default": {
            "BACKEND": "dbqueue_django.tasks.DBQueueBackend",
            "QUEUES": ["default", "emails"],
        }
    }
