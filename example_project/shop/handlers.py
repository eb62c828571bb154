"""What ``manage.py runqueueworker`` does with each queued confirmation: send the e-mail."""

from __future__ import annotations

from django.core.mail import send_mail

from dbqueue_django import handler
from shop.models import OrderConfirmation


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
