"""Django settings for the Django-based systems (dbqueue's manager, Django Tasks)."""

import importlib.util
import os

from psycopg.conninfo import conninfo_to_dict

_info = conninfo_to_dict(os.environ["BENCH_DJANGO_DSN"])

SECRET_KEY = "bench-only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _info.get("dbname", ""),
        "USER": _info.get("user", ""),
        "PASSWORD": _info.get("password", ""),
        "HOST": _info.get("host", ""),
        "PORT": str(_info.get("port", "")),
        "CONN_MAX_AGE": None,
    }
}
#: The popper of a client pair (the pairs workload): the same database on a connection of its
#: own. Django's connections are per thread and alias, so a pusher and a popper in one thread
#: need two aliases.
POPPER = "popper"
DATABASES[POPPER] = dict(DATABASES["default"])
INSTALLED_APPS = ["django.contrib.contenttypes", "dbqueue_django", "bench.djangoapp"]
if importlib.util.find_spec("django_tasks_db") is not None:
    INSTALLED_APPS.append("django_tasks_db")
    TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
LOGGING_CONFIG = None
