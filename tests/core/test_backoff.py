"""Retry back-off: exponential growth, the cap, jitter bounds, huge attempt counts, bad configs."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from dbqueue.backoff import Backoff
from dbqueue.errors import InvalidSpec

S = timedelta(seconds=1)


def test_grows_exponentially_from_base() -> None:
    b = Backoff(base=2 * S, factor=2.0, cap=timedelta(hours=1), jitter=0)
    assert [b.delay(a) for a in (1, 2, 3, 4, 5)] == [2 * S, 4 * S, 8 * S, 16 * S, 32 * S]


def test_other_factors() -> None:
    b = Backoff(base=10 * S, factor=3.0, cap=timedelta(days=1), jitter=0)
    assert [b.delay(a) for a in (1, 2, 3)] == [10 * S, 30 * S, 90 * S]
    flat = Backoff(base=5 * S, factor=1.0, cap=timedelta(minutes=1), jitter=0)
    assert {flat.delay(a) for a in range(1, 50)} == {5 * S}


def test_attempts_below_one_wait_the_base() -> None:
    b = Backoff(base=2 * S, jitter=0)
    assert b.delay(0) == b.delay(-3) == b.delay(1) == 2 * S


def test_capped() -> None:
    b = Backoff(base=2 * S, factor=2.0, cap=timedelta(minutes=1), jitter=0)
    assert b.delay(5) == 32 * S
    assert b.delay(6) == timedelta(minutes=1)  # 64 s, capped
    assert b.delay(100) == timedelta(minutes=1)


def test_never_decreases_with_attempts() -> None:
    b = Backoff(jitter=0)
    delays = [b.delay(a) for a in range(1, 200)]
    assert delays == sorted(delays)
    assert delays[-1] == b.cap


def test_default_is_2s_doubling_capped_at_an_hour_with_10_percent_jitter() -> None:
    b = Backoff()
    assert (b.base, b.factor, b.cap, b.jitter) == (2 * S, 2.0, timedelta(hours=1), 0.1)


@pytest.mark.parametrize("attempts", [1, 3, 8, 12, 20, 500])
def test_jitter_stays_within_its_bounds(attempts: int) -> None:
    b = Backoff(base=2 * S, factor=2.0, cap=timedelta(hours=1), jitter=0.25)
    exact = Backoff(base=2 * S, factor=2.0, cap=timedelta(hours=1), jitter=0).delay(attempts)
    rng = random.Random(1234)
    seen = [b.delay(attempts, rng) for _ in range(2000)]
    assert all(exact * 0.75 <= d <= exact * 1.25 for d in seen)
    # It really spreads: both sides of the exact value, over most of the band.
    assert min(seen) < exact * 0.8 and max(seen) > exact * 1.2


def test_jitter_is_reproducible_with_a_seeded_rng() -> None:
    b = Backoff(jitter=0.5)
    first = [b.delay(3, random.Random(7)) for _ in range(3)]
    assert len(set(first)) == 1
    assert b.delay(3, random.Random(8)) != first[0]


def test_jitter_without_an_rng_uses_the_module_random() -> None:
    b = Backoff(base=10 * S, jitter=0.1)
    for _ in range(200):
        assert 9 * S <= b.delay(1) <= 11 * S


@pytest.mark.parametrize("attempts", [1000, 30000, 32767])
def test_huge_attempt_counts_do_not_overflow(attempts: int) -> None:
    b = Backoff(base=2 * S, factor=2.0, cap=timedelta(hours=1), jitter=0)
    assert b.delay(attempts) == timedelta(hours=1)
    big = Backoff(base=2 * S, factor=10.0, cap=timedelta(days=3650), jitter=0.1)
    assert big.delay(attempts, random.Random(0)) <= timedelta(days=3650) * 1.1


def test_huge_factor_does_not_overflow() -> None:
    b = Backoff(base=S, factor=1e300, cap=timedelta(days=1), jitter=0)
    assert b.delay(30000) == timedelta(days=1)


def test_zero_base_stays_zero() -> None:
    b = Backoff(base=timedelta(0), cap=timedelta(0), jitter=0.5)
    assert b.delay(30000, random.Random(1)) == timedelta(0)


def test_a_huge_cap_with_jitter_still_gives_a_timedelta() -> None:
    # cap=timedelta.max reads as "no cap"; jitter above it must not overflow timedelta.
    b = Backoff(base=S, cap=timedelta.max, jitter=0.1)
    for seed in range(20):  # seeds 0, 2, 5, 6... jitter upwards
        assert isinstance(b.delay(30000, random.Random(seed)), timedelta)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"base": -S}, "base"),
        ({"base": 10 * S, "cap": 5 * S}, "cap"),
        ({"factor": 0.5}, "factor"),
        ({"factor": 0}, "factor"),
        ({"factor": -2.0}, "factor"),
        ({"jitter": -0.1}, "jitter"),
        ({"jitter": 1.0}, "jitter"),
        ({"jitter": 2}, "jitter"),
        ({"jitter": float("nan")}, "jitter"),
    ],
)
def test_invalid_configs_raise_invalid_spec(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(InvalidSpec, match=fragment):
        Backoff(**kwargs)  # type: ignore[arg-type]


def test_a_nan_factor_is_refused() -> None:
    # nan < 1 is False, so a NaN factor slips through and the first delay() raises ValueError
    # ("cannot convert float NaN to integer") inside fail().
    with pytest.raises(InvalidSpec, match="factor"):
        Backoff(factor=float("nan"))


@pytest.mark.parametrize(
    "kwargs",
    [{"base": 2}, {"cap": 3600}, {"factor": "2"}, {"jitter": "0.1"}],
    ids=["base-int", "cap-int", "factor-str", "jitter-str"],
)
def test_wrong_types_raise_invalid_spec_not_type_error(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidSpec, match=next(iter(kwargs))):
        Backoff(**kwargs)  # type: ignore[arg-type]


def test_boundaries_are_valid() -> None:
    Backoff(base=timedelta(0), cap=timedelta(0), factor=1.0, jitter=0)
    Backoff(base=S, cap=S, jitter=0.999)
