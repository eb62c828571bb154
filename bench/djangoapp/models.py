"""The benchmark's queue models: one 300-character text payload, like the peers'."""

from datetime import timedelta

from django.db import models

from dbqueue_django.models import QueueModel, RingQueueModel


class BenchJob(QueueModel):
    payload = models.TextField()


class BenchTick(RingQueueModel):
    """The ring of ``dbqueue-ring-django``. A model declares one capacity for every workload,
    so this one runs only those whose depth (``System.expect``) fits it: cycle and pairs keep at
    most 400 messages in it, the bloat soak 1,000, steady every message pushed in the run should
    the consumers stall (300 in a quick run, 4,000 in a full one). The rest need up to 200,000
    (push_batch) or 300,000 (longtx) slots, which would make this table no longer a small ring."""

    payload = models.TextField()

    class QueueOptions:
        capacity = 5_000
        # Generous: a steady-state producer must never fail because a consumer is slow to start.
        push_timeout = timedelta(seconds=60)
