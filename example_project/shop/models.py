"""The shop's orders, the queue of confirmation e-mails to send for them (and the record of
those sent), the ring of order events its sales ledger is fed from, and the page views its
analytics archive to Parquet."""

from datetime import timedelta
from decimal import Decimal

from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone

from dbqueue_django.models import QueueModel, RingQueueModel


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

    def __str__(self) -> str:
        return f"Confirmation of order #{self.order_id} to {self.email}"


class OrderEvent(RingQueueModel):
    """An order placed, for the sales ledger: pushed in the order's transaction too. A ring
    (preallocated slots): a steady stream that never grows a table or leaves bloat."""

    order_id = models.BigIntegerField()
    total = models.DecimalField(max_digits=10, decimal_places=2)

    class QueueOptions:
        # Sized to ride out a 5-minute worker outage at the rate the shop sustains (~320
        # orders/s, see docs/howto/ring-full.md): 320 x 300 s. Beyond that, pushes spill.
        capacity = 96_000
        # An order never waits for a slot: a push into a full ring goes to the overflow
        # table, delivered after the ring's messages (a web request must not block).
        when_full = "spill"

    def __str__(self) -> str:
        return f"Order #{self.order_id} placed ({self.total})"


class Sale(models.Model):
    """The sales ledger: one row per order, written by the OrderEvent handler. Keyed by the
    order, so an event delivered twice (at least once) is recorded once."""

    order_id = models.BigIntegerField(primary_key=True)
    total = models.DecimalField(max_digits=10, decimal_places=2)
    placed_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"Sale of order #{self.order_id} ({self.total})"


class SentConfirmation(models.Model):
    """The confirmation e-mails sent: one row per order, written by the handler in the
    transaction that sends the e-mail, so an order with no row has had no e-mail. Delivery is
    at least once: ``deliveries`` counts the times the worker handed the handler this order,
    and a second one (a worker killed before its ack) finds the row and sends nothing."""

    order_id = models.BigIntegerField(primary_key=True)
    sent_at = models.DateTimeField(default=timezone.now)
    deliveries = models.PositiveIntegerField(default=1)

    def __str__(self) -> str:
        return f"Confirmation of order #{self.order_id} sent at {self.sent_at:%Y-%m-%d %H:%M:%S}"


class PageView(QueueModel):
    """A page seen on the shop's site, for the analytics: a high-volume queue whose processed
    items are kept as done (``keep_done``) until ``manage.py archivequeue`` moves them to
    Parquet, where Spark SQL reads them (``manage.py demospark``)."""

    user_id = models.BigIntegerField()
    path = models.CharField(max_length=200)
    duration_ms = models.IntegerField()

    class QueueOptions:
        keep_done = True
        # Longer than the default 10 s: its handler takes batches of 1,000 views, which a
        # 60-s lease extends every 20 s rather than every 3 s, and no one waits for a view.
        lease = timedelta(seconds=60)

    def __str__(self) -> str:
        return f"{self.path} seen by user #{self.user_id} ({self.duration_ms} ms)"
