"""What ``manage.py runqueueworker`` does with each queued confirmation (send the e-mail) and
with the order events (record the sales)."""

from __future__ import annotations

from django.core.mail import send_mail

from dbqueue_django import handler
from shop.models import OrderConfirmation, OrderEvent, Sale


@handler(OrderConfirmation, batch_size=500)
def send_confirmation(job: OrderConfirmation) -> None:
    """Send one confirmation. An exception (an SMTP error) fails the item: the worker retries
    it with back-off, and after ``max_attempts`` it waits in the admin's failed items."""
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
