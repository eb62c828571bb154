"""Queue models for the tests: one with a field of every supported kind, one minimal."""

from datetime import timedelta

from django.db import models

from dbqueue_django.models import QueueModel


class Job(QueueModel):
    """The conformance suite's queue (its core twin is tests/conformance/spec.py)."""

    name = models.CharField(max_length=50)
    n = models.IntegerField(default=0)
    doc = models.JSONField(null=True)
    at = models.DateTimeField(null=True)
    amount = models.DecimalField(max_digits=8, decimal_places=2, null=True)
    uid = models.UUIDField(null=True)
    blob = models.BinaryField(null=True)
    flag = models.BooleanField(default=False)
    small = models.PositiveSmallIntegerField(null=True)

    class QueueOptions:
        max_attempts = 3
        lease = timedelta(seconds=30)


class Ping(QueueModel):
    """A queue with a single field and default options."""

    message = models.TextField()
