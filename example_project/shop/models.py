"""The shop's orders, and the queue of confirmation e-mails to send for them."""

from datetime import timedelta
from decimal import Decimal

from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone

from dbqueue_django.models import QueueModel


class Order(models.Model):
    email = models.EmailField("customer e-mail")
    total = models.DecimalField(
        max_digits=10, decimal_places=2, validators=[MinValueValidator(Decimal("0.00"))]
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"Order #{self.pk} ({self.email}, {self.total})"


class OrderConfirmation(QueueModel):
    """One confirmation e-mail to send: pushed in the transaction that saves the order."""

    order_id = models.BigIntegerField()
    email = models.EmailField()

    class QueueOptions:
        max_attempts = 5
        lease = timedelta(seconds=60)

    def __str__(self) -> str:
        return f"Confirmation of order #{self.order_id} to {self.email}"
