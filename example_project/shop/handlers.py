"""What ``manage.py runqueueworker`` does with each queued confirmation (send the e-mail, once),
with the order events (record the sales) and with the page views (nothing yet: see below)."""

from __future__ import annotations

from django.core.mail import send_mail
from django.db import transaction
from django.db.models import F

from dbqueue_django import handler
from shop.models import OrderConfirmation, OrderEvent, PageView, Sale, SentConfirmation


@handler(OrderConfirmation, batch_size=500)
def send_confirmation(job: OrderConfirmation) -> None:
    """Send one confirmation, once: recorded as a ``SentConfirmation`` in the transaction that
    sends it. An exception (an SMTP error) rolls the record back and fails the item: the
    worker retries it with back-off, and after ``max_attempts`` it waits in the admin's failed
    items. A confirmation delivered again (a worker died before its ack) is only counted."""
    with transaction.atomic():
        # A copy handled at the same moment by another worker waits on this row's key until
        # the first commits, then finds it.
        record, created = SentConfirmation.objects.get_or_create(order_id=job.order_id)
        if not created:
            SentConfirmation.objects.filter(pk=record.pk).update(deliveries=F("deliveries") + 1)
            return
        send_mail(
            subject=f"Order #{job.order_id} confirmed",
            message=f"Thank you for your order #{job.order_id}.",
            from_email="shop@example.com",
            recipient_list=[job.email],
        )


@handler(OrderEvent, batch=True, batch_size=256)
def record_sales(events: list[OrderEvent]) -> None:
    """Record a batch of orders in the sales ledger, one statement for the batch. A batch
    delivered again (a worker died before its ack) adds nothing: the ledger is keyed by order."""
    Sale.objects.bulk_create(
        [Sale(order_id=e.order_id, total=e.total, placed_at=e.pushed_at) for e in events],
        ignore_conflicts=True,
    )


@handler(PageView, batch=True, batch_size=1000)
def check_page_views(views: list[PageView]) -> None:
    """Take a batch of page views. The analytics are computed later, by Spark SQL over the
    Parquet archive (``manage.py demospark``); this handler only checks each view is one the
    site can have served, so the worker's rate is the queue's own (pop, ack as done)."""
    for view in views:
        if not view.path.startswith("/"):
            raise ValueError(f"page view #{view.pk}: {view.path!r} is not a path of the site")
