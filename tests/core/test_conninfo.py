"""dbqueue.conninfo: the one builder of libpq connection strings."""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict

from dbqueue.conninfo import conninfo, libpq_conninfo
from dbqueue.errors import InvalidArgument, UnsupportedDatabase


def test_keywords_libpq_knows_are_kept_the_rest_left_out() -> None:
    # Django's connection parameters carry psycopg-only keywords and None values.
    params = {
        "dbname": "shop",
        "user": "app",
        "host": "/var/run/postgresql",
        "port": 5433,
        "password": None,
        "sslmode": "prefer",
        "cursor_factory": object(),
        "context": object(),
        "prepare_threshold": 5,
    }
    assert conninfo_to_dict(libpq_conninfo(params)) == {
        "dbname": "shop",
        "user": "app",
        "host": "/var/run/postgresql",
        "port": "5433",
        "sslmode": "prefer",
    }


def test_values_with_spaces_and_quotes_are_quoted() -> None:
    info = libpq_conninfo({"dbname": "my db", "password": "it's"})
    assert conninfo_to_dict(info) == {"dbname": "my db", "password": "it's"}


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgresql://u@h/db", "postgresql://u@h/db"),
        ("postgres://u@h/db", "postgresql://u@h/db"),
        ("postgresql+psycopg://u@h/db", "postgresql://u@h/db"),
        ("  host=h dbname=db  ", "host=h dbname=db"),
    ],
)
def test_a_url_or_a_libpq_string(given: str, expected: str) -> None:
    assert conninfo(given) == expected


def test_another_database_or_nothing_is_refused_clearly() -> None:
    with pytest.raises(UnsupportedDatabase, match=r"the archive needs PostgreSQL.*'mysql' URL"):
        conninfo("mysql+pymysql://u@h/db", needed_by="the archive")
    for empty in ("", "   "):
        with pytest.raises(InvalidArgument, match="is empty"):
            conninfo(empty)
