"""Logs every request in as the superuser "admin": for taking screenshots, never deploy."""

from collections.abc import Callable

from django.contrib.auth import get_user_model
from django.http import HttpRequest, HttpResponse


class LogInAsAdmin:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request.user = get_user_model().objects.get(username="admin")
        return self.get_response(request)
