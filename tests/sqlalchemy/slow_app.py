"""A handler for Job that takes its time: a job named "sleep 0.5" sleeps that many seconds,
so a test can take the database away from a ``dbqueue worker`` while it holds items."""

from __future__ import annotations

import time

from dbqueue_sa.handlers import handler
from tests.sqlalchemy.models import Job


@handler(Job, batch_size=10)
def slow_job(job: Job) -> None:
    if job.name.startswith("sleep "):
        time.sleep(float(job.name.split()[1]))
