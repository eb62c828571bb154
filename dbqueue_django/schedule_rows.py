"""The periodic schedules' rows: :class:`QueueSchedule`, the schedule table
(:data:`dbqueue.schema.SCHEDULE_TABLE`) the workers claim each tick on (see
:mod:`dbqueue.scheduler`), created in each queue's database by ``migrate``."""

from __future__ import annotations

from django.db import models

from dbqueue.schema import SCHEDULE_TABLE


class QueueSchedule(models.Model):
    """A periodic schedule as the workers share it: the last tick one of them pushed."""

    name = models.CharField(max_length=200, primary_key=True)
    queue = models.CharField(max_length=255, help_text="the queue its ticks are pushed into")
    expression = models.CharField(max_length=200, help_text="cron expression")
    timezone = models.CharField(max_length=64, help_text="IANA zone of the expression")
    since = models.DateTimeField(help_text="when this expression and zone were first declared")
    last_tick = models.DateTimeField(null=True, blank=True, help_text="the last tick pushed")
    next_tick = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = "dbqueue_django"
        db_table = SCHEDULE_TABLE
        verbose_name = "queue schedule"

    def __str__(self) -> str:
        return f"{self.name} ({self.expression}, {self.timezone})"
