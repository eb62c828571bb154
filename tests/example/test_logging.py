"""The example shop's LOGGING: request errors (the 500s, which Django otherwise only mails to
the admins with DEBUG off) and dbqueue's warnings and worker summary reach stderr; a
worker's per-batch lines do not."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.example.conftest import manage

pytestmark = pytest.mark.sqlite

LOG_SOME = (
    "import logging; "
    "logging.getLogger('django.request').error('a 500 here'); "
    "logging.getLogger('dbqueue.worker').warning('an item failed'); "
    "logging.getLogger('dbqueue.worker.summary').info('the summary'); "
    "logging.getLogger('dbqueue.worker').debug('a batch'); "
    "logging.getLogger('dbqueue.worker').info('released')"
)


def test_request_errors_and_dbqueue_warnings_go_to_stderr(tmp_path: Path) -> None:
    done = manage(f"sqlite:///{tmp_path / 'shop.db'}", "shell", "-c", LOG_SOME)
    assert done.returncode == 0, done.stderr
    assert "ERROR django.request MainThread a 500 here" in done.stderr
    assert "WARNING dbqueue.worker MainThread an item failed" in done.stderr
    assert "INFO dbqueue.worker.summary MainThread the summary" in done.stderr
    assert "a batch" not in done.stderr and "released" not in done.stderr
