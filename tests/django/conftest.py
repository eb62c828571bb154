"""Fixtures shared by the Django tests."""

import pytest

from tests.django.aliases import ALIASES


@pytest.fixture(params=ALIASES)
def alias(request: pytest.FixtureRequest) -> str:
    """Each database alias in turn (PostgreSQL, SQLite)."""
    return str(request.param)
