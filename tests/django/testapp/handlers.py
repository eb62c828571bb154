"""The test app's handlers, found by ``dbqueue_django.handlers.autodiscover()``."""

from __future__ import annotations

from dbqueue_django import handler
from tests.django.testapp.models import Ping, Tick

#: Messages handled, in order (list.append is atomic: worker threads share it).
RECEIVED: list[str] = []


@handler(Ping, batch_size=10)
def record_ping(ping: Ping) -> None:
    """Record the message; "boom" raises, so failures can be tested."""
    if ping.message == "boom":
        raise ValueError("boom")
    RECEIVED.append(ping.message)


@handler(Tick, batch_size=4)
def record_tick(tick: Tick) -> None:
    """Push a Ping saying which tick was handled, into the tick's database (so another
    process can see it); the symbol "BOOM" raises, so a ring's failures can be tested."""
    if tick.symbol == "BOOM":
        raise ValueError(f"boom at tick #{tick.id}")
    Ping.queue.using(tick._state.db or "default").push(message=f"tick {tick.symbol} #{tick.id}")
