"""The database aliases the Django tests run on: PostgreSQL as ``default``, and SQLite."""

import pytest

ALIASES = [
    pytest.param("default", id="pg", marks=pytest.mark.postgresql),
    pytest.param("sqlite", id="sqlite", marks=pytest.mark.sqlite),
]
