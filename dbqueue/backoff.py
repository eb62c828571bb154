"""Retry back-off: how long a failed item waits before it is ready again."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential back-off with a cap and proportional jitter.

    ``delay(attempts) = min(base * factor ** (attempts - 1), cap) * (1 ± jitter)``; jitter spreads
    the retries of a batch that failed together (a downstream outage) so they do not all return
    in the same instant.
    """

    base: timedelta = timedelta(seconds=2)
    factor: float = 2.0
    cap: timedelta = timedelta(hours=1)
    jitter: float = 0.1

    def __post_init__(self) -> None:
        from dbqueue.errors import InvalidSpec

        if self.base < timedelta(0) or self.cap < self.base:
            raise InvalidSpec("backoff needs 0 <= base <= cap")
        if self.factor < 1 or not 0 <= self.jitter < 1:
            raise InvalidSpec("backoff needs factor >= 1 and 0 <= jitter < 1")

    def delay(self, attempts: int, rng: random.Random | None = None) -> timedelta:
        """The wait after the ``attempts``-th failed attempt (1-based)."""
        exponent = max(attempts - 1, 0)
        seconds = self.base.total_seconds()
        cap = self.cap.total_seconds()
        # Stop multiplying once over the cap: factor ** 30000 would overflow a float.
        for _ in range(exponent):
            seconds *= self.factor
            if seconds >= cap:
                seconds = cap
                break
        if self.jitter:
            r = (rng or random).uniform(-self.jitter, self.jitter)
            seconds *= 1 + r
        return timedelta(seconds=seconds)
