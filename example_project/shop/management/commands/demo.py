"""``manage.py demo``: the shop, its confirmation queue and its order-event ring end to end,
with checks.

Every step checks what it did; the command exits non-zero if any check fails.
"""

from __future__ import annotations

import time
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core import mail
from django.core.management import call_command
from django.core.management.base import CommandParser
from django.test import Client
from django.utils import timezone

from dbqueue.message import State
from shop.management.report import (
    Checks,
    Report,
    database_name,
    format_stats,
    positive,
    rate,
    total_items,
)
from shop.models import Order, OrderConfirmation, OrderEvent, Sale, SentConfirmation

PUSH_BATCH = 1_000
WORKER_THREADS = 2
#: Payload order ids of the bulk messages, far from the real orders' ids.
BULK_ORDER_IDS = 1_000_000_000
INVALID_EMAIL = "not-an-email"
SMTP_ERROR = "SMTP timeout"


def non_negative(value: str) -> int:
    number = int(value)
    if number < 0:
        raise ValueError(value)
    return number


class Command(Report):
    help = (
        "Run the shop end to end: place orders over HTTP (each enqueues its confirmation in "
        "the order's transaction), bulk-push confirmations, drain the queue, show a failure "
        "and its retry. Exits non-zero if any check fails."
    )
    requires_system_checks = "__all__"

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--orders",
            type=positive,
            default=20,
            help="valid orders to place over HTTP (one invalid order is tried as well; default 20)",
        )
        parser.add_argument(
            "--bulk",
            type=non_negative,
            default=10_000,
            help=f"confirmations to push with push_many, in batches of {PUSH_BATCH:,} "
            f"(default 10000)",
        )

    def handle(self, *args: Any, orders: int, bulk: int, **options: Any) -> None:
        self.checks = Checks(self.stdout, self.style)
        started = time.perf_counter()

        self.section("Database")
        call_command("migrate", verbosity=0, interactive=False)
        database = database_name()
        self.stdout.write(f"  {database}: migrations applied")

        self.section("Clean up earlier runs")
        self.clean_up()

        self.section(f"Place {orders} orders over HTTP (POST /orders/), and one invalid order")
        order_ids, message_ids = self.place_orders(orders)

        self.section(f"Push {bulk:,} confirmations with push_many (batches of {PUSH_BATCH:,})")
        bulk_ids, push_seconds = self.push_bulk(bulk)

        # Message id -> the order id in its payload, in push order.
        expected = dict(zip(message_ids, order_ids, strict=True))
        expected.update((m, BULK_ORDER_IDS + i) for i, m in enumerate(bulk_ids))
        self.section(
            f"Send the confirmations and record the sales: runqueueworker --burst "
            f"--concurrency {WORKER_THREADS}"
        )
        drained, drain_seconds = self.drain(expected)
        self.check_sales(order_ids)

        self.section("A failed delivery: pop one item, fail(item, 'SMTP timeout')")
        if order_ids:
            self.fail_one(order_ids[0])
        else:
            self.checks(False, "an order to show the failure path with")

        final = OrderConfirmation.queue.stats()
        self.summary(
            [
                ("database", database),
                ("where", settings.SHOP_DATABASE_DESCRIPTION),
                ("orders placed", f"{len(order_ids)} over HTTP (+1 invalid, refused with 400)"),
                (
                    "messages pushed",
                    f"{len(expected) + len(order_ids[:1]):,} ({len(message_ids)} by POST "
                    f"/orders/, {len(bulk_ids):,} by push_many, {len(order_ids[:1])} for the "
                    f"failure path)",
                ),
                ("push_many rate", rate(len(bulk_ids), push_seconds)),
                (
                    "worker rate",
                    rate(drained, drain_seconds)
                    + f", runqueueworker, {WORKER_THREADS} threads; bound by the handler (Django "
                    f"builds each e-mail in about a millisecond)",
                ),
                ("final stats", format_stats(final)),
                (
                    "order events",
                    f"a ring of {OrderEvent.queue.stats()['capacity']:,} slots; "
                    f"{Sale.objects.count()} recorded as sales",
                ),
                ("checks", f"{self.checks.passed} passed, {len(self.checks.failed)} failed"),
                ("run time", f"{time.perf_counter() - started:.1f} s"),
            ]
        )
        self.verdict()

    # -- steps --------------------------------------------------------------------------------

    def clean_up(self) -> None:
        queue = OrderConfirmation.queue
        purged = queue.purge() + OrderEvent.queue.purge()
        deleted, _ = Order.objects.all().delete()
        Sale.objects.all().delete()
        SentConfirmation.objects.all().delete()
        self.stdout.write(f"  removed {deleted} orders and {purged} queued messages")
        stats = queue.stats()
        self.checks(
            total_items(stats) == 0 and total_items(OrderEvent.queue.stats()) == 0,
            "the queue and the ring are empty",
        )
        self.checks(
            not Order.objects.exists() and not Sale.objects.exists(),
            "the orders and sales tables are empty",
        )

    def place_orders(self, count: int) -> tuple[list[int], list[int]]:
        client = Client()  # SERVER_NAME "testserver", which ALLOWED_HOSTS allows
        order_ids: list[int] = []
        message_ids: list[int] = []
        started = time.perf_counter()
        for i in range(count):
            if i == count // 2:
                self.place_invalid_order(client)
            total = Decimal(9) + Decimal(i) * Decimal("2.50") + Decimal("0.99")
            response = client.post(
                "/orders/", {"email": f"customer{i + 1}@example.com", "total": str(total)}
            )
            if response.status_code != 201:
                self.checks(False, f"order {i + 1}: POST /orders/ returned {response.status_code}")
                continue
            body = response.json()
            order_ids.append(body["order"])
            message_ids.append(body["message"])
        seconds = time.perf_counter() - started
        self.stdout.write(
            f"  {len(order_ids)} orders placed in {seconds:.2f} s; "
            f"first: order #{order_ids[0] if order_ids else '-'}, "
            f"message #{message_ids[0] if message_ids else '-'}"
        )
        self.checks(len(order_ids) == count, f"all {count} valid orders answered 201 Created")
        stored = set(Order.objects.values_list("id", flat=True))
        self.checks(stored == set(order_ids), f"{count} orders stored, the ones the API returned")
        queued = OrderConfirmation.queue.items()
        pairs = set(queued.values_list("id", "order_id"))
        self.checks(
            pairs == set(zip(message_ids, order_ids, strict=True)),
            f"{count} confirmations queued, one per order, with the ids the API returned",
        )
        events = set(OrderEvent.queue.items().values_list("order_id", flat=True))
        self.checks(events == set(order_ids), f"{count} order events in the ring, one per order")
        response = Client().get("/queue/")
        self.checks(
            response.status_code == 200 and response.json()["ready"] == count,
            f"GET /queue/ reports {count} ready messages",
        )
        return order_ids, message_ids

    def place_invalid_order(self, client: Client) -> None:
        orders_before = Order.objects.count()
        messages_before = self.queued()
        response = client.post("/orders/", {"email": INVALID_EMAIL, "total": "12.50"})
        orders_after = Order.objects.count()
        messages_after = self.queued()
        errors = response.json().get("errors", {}) if response.status_code == 400 else {}
        self.stdout.write(
            f"  invalid order (email {INVALID_EMAIL!r}): HTTP {response.status_code}, "
            f"errors on {sorted(errors)}; orders {orders_before} -> {orders_after}, "
            f"messages {messages_before} -> {messages_after}"
        )
        self.checks(
            response.status_code == 400 and "email" in errors,
            "the invalid order is refused with 400 and an error on 'email'",
        )
        self.checks(
            (orders_after, messages_after) == (orders_before, messages_before),
            "the invalid order left nothing behind (no order, no message, no event)",
        )

    def queued(self) -> int:
        """Messages in the confirmation queue and the event ring together."""
        return total_items(OrderConfirmation.queue.stats()) + total_items(OrderEvent.queue.stats())

    def push_bulk(self, count: int) -> tuple[list[int], float]:
        rows = [
            {"order_id": BULK_ORDER_IDS + i, "email": f"bulk{i}@example.com"} for i in range(count)
        ]
        started = time.perf_counter()
        ids = OrderConfirmation.queue.push_many(rows, batch_size=PUSH_BATCH)
        seconds = time.perf_counter() - started
        self.stdout.write(f"  {rate(len(ids), seconds)}")
        self.checks(
            len(ids) == count and len(set(ids)) == count,
            f"push_many returned {count:,} distinct ids",
        )
        return ids, seconds

    def drain(self, expected: dict[int, int]) -> tuple[int, float]:
        """Run the worker until the queue is empty; ``expected`` maps message id -> order id.

        shop/handlers.py sends one e-mail per confirmation; the in-memory mail backend keeps
        them, so each can be checked against what was pushed.
        """
        queue = OrderConfirmation.queue
        before = queue.stats()
        self.stdout.write(f"  before: {format_stats(before)}")
        self.checks(
            before["ready"] == len(expected) == total_items(before),
            f"{len(expected):,} messages are ready, and nothing else is queued",
        )
        mail.outbox = []
        started = time.perf_counter()
        call_command(
            "runqueueworker",
            "shop.OrderConfirmation",
            "shop.OrderEvent",
            "--burst",
            f"--concurrency={WORKER_THREADS}",
            "--log-level=WARNING",
            stdout=self.stdout,
        )
        seconds = time.perf_counter() - started
        sent = [(m.to[0], m.subject) for m in mail.outbox]
        self.stdout.write(f"  {rate(len(sent), seconds)}, {len(sent):,} e-mails sent")
        confirmed = sorted(int(subject.split("#")[1].split()[0]) for _, subject in sent)
        self.checks(
            confirmed == sorted(expected.values()),
            f"one e-mail per message, exactly the {len(expected):,} orders pushed",
        )
        after = queue.stats()
        self.stdout.write(f"  after: {format_stats(after)}")
        self.checks(total_items(after) == 0, "the queue is empty: every message was acked")
        return len(sent), seconds

    def check_sales(self, order_ids: list[int]) -> None:
        """shop/handlers.py recorded each order event of the ring as a sale."""
        sales = set(Sale.objects.values_list("order_id", "total"))
        orders = set(Order.objects.filter(pk__in=order_ids).values_list("id", "total"))
        stats = OrderEvent.queue.stats()
        self.stdout.write(
            f"  order events: {len(sales)} recorded as sales; ring: {stats['capacity']:,} "
            f"slots, {stats['ready'] + stats['leased']} in use"
        )
        self.checks(sales == orders, f"{len(orders)} sales recorded, one per order, with its total")
        self.checks(total_items(stats) == 0, "the ring is empty: every event was acked")

    def fail_one(self, order_id: int) -> None:
        queue = OrderConfirmation.queue
        order = Order.objects.get(pk=order_id)
        pushed = queue.push(order_id=order.pk, email=order.email)
        batch = queue.pop_batch(1)
        if not self.checks(
            [item.id for item in batch] == [pushed],
            f"popped message #{pushed} (order #{order.pk})",
        ):
            return
        item = batch[0]
        result = queue.fail(item, SMTP_ERROR)
        self.checks(result == {pushed: State.READY}, "fail() put it back to ready, for a retry")
        stats = queue.stats()
        self.stdout.write(f"  stats: {format_stats(stats)}")
        self.checks(
            (stats["scheduled"], stats["ready"], stats["leased"], stats["failed"]) == (1, 0, 0, 0),
            "stats show it scheduled for a retry (not ready yet, not failed)",
        )
        row = queue.items().get(pk=pushed)
        wait = row.run_at - timezone.now()
        max_attempts = queue.spec.options.max_attempts
        self.stdout.write(
            f"  message #{pushed}: attempt {row.attempts} of {max_attempts} failed with "
            f"{row.last_error!r}; retry in {wait.total_seconds():.1f} s, at {row.run_at:%H:%M:%S}"
        )
        self.checks(
            row.attempts == 1 and row.last_error == SMTP_ERROR and wait > timedelta(0),
            "the error and the attempt are recorded, the retry is in the future",
        )
