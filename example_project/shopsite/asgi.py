"""ASGI entry point of the example shop (``uvicorn shopsite.asgi:application``, from
``example_project/``), for its async view ``POST /orders/async/`` and every other one."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shopsite.settings")

application = get_asgi_application()
