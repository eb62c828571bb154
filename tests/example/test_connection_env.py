"""The example shop's connection settings from the environment (shopsite/connection_env.py):
the values the deployment guide sets, and a clear refusal of any other."""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType

import pytest

from tests.example.conftest import EXAMPLE
from tests.processes import run_process


def load() -> ModuleType:
    """The module from the example's directory (not a package the tests import)."""
    spec = importlib.util.spec_from_file_location(
        "shop_connection_env", EXAMPLE / "shopsite" / "connection_env.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_defaults_are_djangos() -> None:
    env = load()
    assert env.database_options({}) == {
        "CONN_MAX_AGE": 0,
        "CONN_HEALTH_CHECKS": False,
        "ATOMIC_REQUESTS": False,
        "DISABLE_SERVER_SIDE_CURSORS": False,
    }
    assert env.prepared_statements({}) is True


def test_the_guides_values() -> None:
    env = load()
    given = {
        "DJANGO_CONN_MAX_AGE": "60",
        "DJANGO_CONN_HEALTH_CHECKS": "1",
        "DJANGO_ATOMIC_REQUESTS": "true",
        "DATABASE_POOLING": "transaction",
    }
    assert env.database_options(given) == {
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
        "ATOMIC_REQUESTS": True,
        "DISABLE_SERVER_SIDE_CURSORS": True,
    }
    assert env.prepared_statements(given) is False
    assert env.conn_max_age({"DJANGO_CONN_MAX_AGE": "none"}) is None
    assert env.prepared_statements({"DATABASE_POOLING": "session"}) is True


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DJANGO_CONN_MAX_AGE", "-1"),
        ("DJANGO_CONN_MAX_AGE", "1m"),
        ("DJANGO_CONN_HEALTH_CHECKS", "maybe"),
        ("DJANGO_ATOMIC_REQUESTS", "2"),
        ("DATABASE_POOLING", "statement"),
    ],
)
def test_a_bad_value_is_refused_with_its_name(name: str, value: str) -> None:
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match=rf"^{name}={value!r}: "):
        load().database_options({name: value})


@pytest.mark.sqlite
def test_the_shop_refuses_to_start_with_a_bad_value(tmp_path) -> None:
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path}/shop.sqlite3"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env["DJANGO_CONN_MAX_AGE"] = "forever"
    done = run_process([sys.executable, "manage.py", "check"], env, cwd=EXAMPLE)
    assert done.returncode == 1
    assert "DJANGO_CONN_MAX_AGE='forever': write whole seconds" in done.stderr
