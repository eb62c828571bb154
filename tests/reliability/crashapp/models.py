"""The crash tests' queue, and the table its handler writes each handled item to."""

from datetime import timedelta

from django.db import models

from dbqueue_django.models import QueueModel


class CrashJob(QueueModel):
    n = models.IntegerField()

    class QueueOptions:
        lease = timedelta(seconds=2)  # a killed worker's items come back within seconds
        max_attempts = 20


class Handled(models.Model):
    """One row per handling: duplicates are items handled more than once."""

    item_id = models.BigIntegerField(db_index=True)
    pid = models.IntegerField()

    def __str__(self) -> str:
        return f"{self.item_id} by {self.pid}"
