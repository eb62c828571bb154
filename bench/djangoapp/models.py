"""The benchmark's queue model: one 300-character text payload, like the peers'."""

from django.db import models

from dbqueue_django.models import QueueModel


class BenchJob(QueueModel):
    payload = models.TextField()
