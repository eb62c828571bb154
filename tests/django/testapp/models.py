"""Queue models for the tests: one with a field of every supported kind (and its twin that
keeps done items), one minimal, a ring queue, a unique queue of each scope, and
one split queue and one ring queue with consumer groups."""

from datetime import timedelta

from django.db import models

from dbqueue import Backoff
from dbqueue_django.models import QueueModel, RingQueueModel


class JobFields(models.Model):
    """The conformance suite's payload: a field of every supported kind (its core twin is
    JOB_FIELDS in tests/conformance/spec.py), for a split queue and a ring."""

    name = models.CharField(max_length=50)
    n = models.IntegerField(default=0)
    doc = models.JSONField(null=True)
    at = models.DateTimeField(null=True)
    amount = models.DecimalField(max_digits=8, decimal_places=2, null=True)
    uid = models.UUIDField(null=True)
    blob = models.BinaryField(null=True)
    flag = models.BooleanField(default=False)
    small = models.PositiveSmallIntegerField(null=True)

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return self.name


class Job(JobFields, QueueModel):
    """The conformance suite's queue (its core twin is tests/conformance/spec.py)."""

    class QueueOptions:
        max_attempts = 3
        lease = timedelta(seconds=30)


class KeptJob(JobFields, QueueModel):
    """Job's twin that keeps its processed items as done (the conformance suite's keep_done
    queue; its core twin is KEPT_OPTIONS in tests/conformance/spec.py)."""

    class QueueOptions:
        max_attempts = 3
        lease = timedelta(seconds=30)
        keep_done = True


class RingJob(JobFields, RingQueueModel):
    """The conformance suite's ring (its core twin is RING_OPTIONS in
    tests/conformance/spec.py)."""

    class QueueOptions:
        capacity = 1024
        max_attempts = 3
        lease = timedelta(seconds=30)
        stranded_after = timedelta(0)
        push_timeout = timedelta(seconds=60)


class Ping(QueueModel):
    """A queue with a single field and default options."""

    message = models.TextField()


class Tick(RingQueueModel):
    """A small ring: full after 8 pushes, and a push into a full ring gives up quickly."""

    symbol = models.CharField(max_length=12)
    price = models.DecimalField(max_digits=12, decimal_places=4)
    volume = models.IntegerField(default=0)
    note = models.TextField(null=True)  # noqa: DJ001 - a nullable payload field

    class QueueOptions:
        capacity = 8
        push_timeout = timedelta(milliseconds=50)
        max_attempts = 2
        lease = timedelta(seconds=5)  # the worker's sweeper runs once per lease time
        backoff = Backoff(base=timedelta(0), cap=timedelta(0))  # a retry is due at once


class FanoutTick(RingQueueModel):
    """A small ring with consumer groups (fan-out): each message is delivered to "email" and
    to "search", each group with its own state of every slot, side table and pop counter."""

    subject = models.CharField(max_length=100)
    note = models.TextField(null=True)  # noqa: DJ001 - a nullable payload field

    class QueueOptions:
        capacity = 8
        groups = ("email", "search")
        push_timeout = timedelta(milliseconds=50)
        max_attempts = 2
        lease = timedelta(seconds=5)
        backoff = Backoff(base=timedelta(0), cap=timedelta(0))  # a retry is due at once


class UniqueJob(QueueModel):
    """A unique queue (issue 22 §2): one unfinished item per account and kind; a push may
    give a key of its own instead."""

    account = models.CharField(max_length=50)
    kind = models.CharField(max_length=20, default="sync")
    note = models.TextField(default="")

    class QueueOptions:
        unique = ("account", "kind")
        max_attempts = 2
        backoff = Backoff(base=timedelta(0), cap=timedelta(0))  # a retry is due at once


class QueuedUniqueJob(QueueModel):
    """A unique queue whose items hold their key only while they wait (scope "queued")."""

    tag = models.CharField(max_length=50)

    class QueueOptions:
        unique = ("tag",)
        unique_scope = "queued"


class StoredUniqueJob(QueueModel):
    """A unique queue that deduplicates only pushes with a key of their own, for as long as
    an item is stored (scope "stored"), kept done items included."""

    tag = models.CharField(max_length=50)

    class QueueOptions:
        unique_scope = "stored"
        keep_done = True


class FanoutJob(QueueModel):
    """A queue with consumer groups (fan-out): each item is delivered to "email" and to
    "search", each group with its own meta table, leases, retries and failed items."""

    subject = models.CharField(max_length=100)

    class QueueOptions:
        groups = ("email", "search")
        max_attempts = 2
        backoff = Backoff(base=timedelta(0), cap=timedelta(0))  # a retry is due at once
