"""The test app's handlers, found by ``dbqueue_django.handlers.autodiscover()``."""

from __future__ import annotations

import time

from dbqueue_django import handler
from tests.django.testapp.models import Ping, Tick

#: Messages handled, in order (list.append is atomic: worker threads share it).
RECEIVED: list[str] = []


@handler(Ping, batch_size=10)
def record_ping(ping: Ping) -> None:
    """Record the message; "boom" raises, so failures can be tested; "sleep 0.5" takes that
    many seconds first, so a test can take the database away while items are in hand."""
    if ping.message == "boom":
        raise ValueError("boom")
    if ping.message.startswith("sleep "):
        time.sleep(float(ping.message.split()[1]))
    RECEIVED.append(ping.message)


@handler(Tick, batch_size=4)
def record_tick(tick: Tick) -> None:
    """Push a Ping saying which tick was handled, into the tick's database (so another
    process can see it); the symbol "BOOM" raises, so a ring's failures can be tested."""
    if tick.symbol == "BOOM":
        raise ValueError(f"boom at tick #{tick.id}")
    Ping.queue.using(tick._state.db or "default").push(message=f"tick {tick.symbol} #{tick.id}")
