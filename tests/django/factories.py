"""factory-boy factories for the test app's queue models.

They only *build* unsaved instances, which the tests push with ``Model.queue.push`` (or
``push_many``) to choose priorities and delays; :func:`payload_of` turns a built instance into
push keywords. (``Model.objects.create`` pushes too, see dbqueue_django.orm.)
"""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from typing import Any

import factory

from dbqueue_django.spec import payload_fields
from tests.django.testapp.models import Job, Ping


class JobFactory(factory.Factory):
    """A Job with every payload field set to a non-default value."""

    class Meta:
        model = Job

    name = factory.Sequence(lambda i: f"job-{i}")
    n = factory.Sequence(lambda i: 1000 + i)
    doc = factory.LazyFunction(lambda: {"tags": ["a", "b"], "depth": {"x": 1.5, "ok": True}})
    at = factory.LazyFunction(lambda: dt.datetime(2026, 5, 17, 8, 30, 1, 123456, tzinfo=dt.UTC))
    amount = Decimal("-1234.56")
    uid = factory.LazyFunction(uuid.uuid4)
    blob = b"\x00\xffpayload\x01"
    flag = True
    small = 7


class PingFactory(factory.Factory):
    class Meta:
        model = Ping

    message = factory.Sequence(lambda i: f"ping {i}")


def payload_of(instance: Job | Ping) -> dict[str, Any]:
    """The push keywords for an unsaved queue model instance (its payload fields only)."""
    return {f.name: getattr(instance, f.attname) for f in payload_fields(type(instance))}
