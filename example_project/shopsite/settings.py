"""Settings of the example shop.

The database is ``DATABASE_URL`` if set, else an embedded PostgreSQL server in
``demo-data/pg`` (SQLite in ``demo-data/`` without pgserver): see ``shopsite/database.py``.
"""

import os
import sys
from pathlib import Path

from shopsite.connection_env import database_options, prepared_statements
from shopsite.database import configure

BASE_DIR = Path(__file__).resolve().parent.parent
DEMO_DATA = BASE_DIR / "demo-data"

# A demo: the key only signs sessions of the local admin. Set DJANGO_SECRET_KEY elsewhere.
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "shop-demo-only-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG") == "1"
# "testserver" is the SERVER_NAME of django.test.Client, which the demo command uses.
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "[::1]", "testserver"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "dbqueue_django",
    "shop",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "shopsite.urls"
WSGI_APPLICATION = "shopsite.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
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

_database = configure(os.environ.get("DATABASE_URL"), DEMO_DATA)
# Connection lifetime, per-request transactions and pooling: see shopsite/connection_env.py.
DATABASES = {"default": {**_database.settings, **database_options(os.environ)}}
DBQUEUE_PREPARED_STATEMENTS = prepared_statements(os.environ)
#: Shown by the demo command's summary (never contains a password).
SHOP_DATABASE_DESCRIPTION = _database.description
# stderr, so that commands whose stdout is data (dumpdata, sqlmigrate) stay clean.
print(f"shop: database: {_database.description}", file=sys.stderr)

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# With DEBUG off, runserver serves the admin's CSS only with --insecure.
STATIC_URL = "static/"

# The demo keeps sent e-mails in memory (django.core.mail.outbox) so it can check each one; a
# real shop names its SMTP server here.
EMAIL_BACKEND = os.environ.get(
    "DJANGO_EMAIL_BACKEND", "django.core.mail.backends.locmem.EmailBackend"
)

# Logs to stderr, where gunicorn, systemd and docker collect them. With DEBUG off, Django
# sends request errors (the 500s) only to mail_admins: without this, they leave no trace.
# dbqueue logs warnings (failed items, expired leases) and the worker's summary once a minute
# (each batch is at DEBUG: runqueueworker --log-level debug shows them).
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(threadName)s %(message)s"}
    },
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "django.request": {"handlers": ["stderr"], "level": "ERROR", "propagate": False},
        "dbqueue": {"handlers": ["stderr"], "level": "WARNING", "propagate": False},
        "dbqueue.worker.summary": {"level": "INFO"},
    },
}
