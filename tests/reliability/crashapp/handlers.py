"""Records every item handled, with the worker's pid; ``DBQUEUE_CRASH_SLEEP`` seconds per
batch widen the window in which a test can kill or signal a worker mid-batch."""

import os
import time

from dbqueue_django import handler
from tests.reliability.crashapp.models import CrashJob, Handled

SLEEP = float(os.environ.get("DBQUEUE_CRASH_SLEEP", "0.02"))


@handler(CrashJob, batch=True, batch_size=100)
def record(jobs: list[CrashJob]) -> None:
    time.sleep(SLEEP)
    Handled.objects.bulk_create(Handled(item_id=job.id, pid=os.getpid()) for job in jobs)
