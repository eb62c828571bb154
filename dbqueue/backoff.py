"""Retry back-off: how long a failed item waits before it is ready again."""

from __future__ import annotations

import math
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

        for name in ("base", "cap"):
            if not isinstance(getattr(self, name), timedelta):
                raise InvalidSpec(
                    f"backoff {name} must be a timedelta, got {getattr(self, name)!r}"
                )
        for name in ("factor", "jitter"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
                raise InvalidSpec(f"backoff {name} must be a number, got {value!r}")
        if self.base < timedelta(0) or self.cap < self.base:
            raise InvalidSpec("backoff needs 0 <= base <= cap")
        if self.factor < 1 or math.isinf(self.factor):
            raise InvalidSpec(f"backoff factor must be finite and >= 1, got {self.factor!r}")
        if not 0 <= self.jitter < 1:
            raise InvalidSpec(f"backoff jitter must be in [0, 1), got {self.jitter!r}")

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
        # A cap near timedelta.max means "no cap": jitter must not push past what fits.
        return timedelta(seconds=min(seconds, _MAX_SECONDS))


_MAX_SECONDS = (timedelta.max - timedelta(days=1)).total_seconds()
