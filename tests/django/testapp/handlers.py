"""The test app's handlers, found by ``dbqueue_django.handlers.autodiscover()``."""

from __future__ import annotations

from dbqueue_django import handler
from tests.django.testapp.models import Ping

#: Messages handled, in order (list.append is atomic: worker threads share it).
RECEIVED: list[str] = []


@handler(Ping, batch_size=10)
def record_ping(ping: Ping) -> None:
    """Record the message; "boom" raises, so failures can be tested."""
    if ping.message == "boom":
        raise ValueError("boom")
    RECEIVED.append(ping.message)
