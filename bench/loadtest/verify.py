"""The load test's checks, once the queues are drained: with SQL, every committed order has
exactly one confirmation recorded and one sale; from the file outbox, exactly one e-mail; and
the orders the clients were told about (201) are the ones committed."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench.loadtest.shop import EXAMPLE, WORKER, ShopConfig

SUBJECT = re.compile(r"^Subject: Order #(\d+) confirmed$", re.M)
#: One row: what each check counts, in one statement.
CHECKS = """
SELECT
  (SELECT count(*) FROM shop_order),
  (SELECT count(*) FROM shop_order o
     WHERE NOT EXISTS (SELECT 1 FROM shop_sentconfirmation c WHERE c.order_id = o.id)),
  (SELECT count(*) FROM shop_sentconfirmation c
     WHERE NOT EXISTS (SELECT 1 FROM shop_order o WHERE o.id = c.order_id)),
  (SELECT count(*) FROM shop_sentconfirmation WHERE deliveries > 1),
  (SELECT count(*) FROM shop_order o
     WHERE NOT EXISTS (SELECT 1 FROM shop_sale s WHERE s.order_id = o.id)),
  (SELECT count(*) FROM shop_sale s
     WHERE NOT EXISTS (SELECT 1 FROM shop_order o WHERE o.id = s.order_id)),
  (SELECT count(*) FROM shop_sale s JOIN shop_order o ON o.id = s.order_id
     WHERE s.total <> o.total)
"""


@dataclass
class Verdict:
    """The checks' counts; :attr:`ok` when every loss, duplicate and stray is zero."""

    orders: int
    #: 201 answers whose order is not in the database (must be none).
    acknowledged_missing: int
    #: Orders committed whose client got no 201 (the connection was cut after the commit).
    committed_unacknowledged: int
    confirmations_lost: int
    confirmations_stray: int
    #: Confirmations the worker delivered more than once (at least once), not sent again.
    confirmations_redelivered: int
    emails_sent: int
    emails_lost: int
    emails_duplicated: int
    sales_lost: int
    sales_stray: int
    sales_wrong_total: int
    #: Items still queued or failed after the drain (per queue and state).
    left_in_queues: dict[str, int]
    #: The e-mails a SIGKILL can send twice: one per worker thread and kill, sent in the
    #: instant between the SMTP call and the commit of its record.
    emails_duplicates_allowed: int = 0

    @property
    def ok(self) -> bool:
        bad = (
            self.acknowledged_missing, self.confirmations_lost, self.confirmations_stray,
            self.emails_lost, self.sales_lost, self.sales_stray, self.sales_wrong_total,
            sum(self.left_in_queues.values()),
        )  # fmt: skip
        return (
            self.orders > 0
            and not any(bad)
            and self.emails_duplicated <= self.emails_duplicates_allowed
        )

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def emails(outbox: Path) -> Counter[int]:
    """E-mails written by the file backend, by order (a file cut short by a SIGKILL counts
    the messages it holds whole)."""
    sent: Counter[int] = Counter()
    for path in outbox.glob("*.log"):
        for match in SUBJECT.finditer(path.read_text(encoding="utf-8", errors="replace")):
            sent[int(match.group(1))] += 1
    return sent


def left_in_queues(config: ShopConfig) -> dict[str, int]:
    """``manage.py queuestats --json``'s non-zero counts of the two queues (not done)."""
    done = subprocess.run(
        [sys.executable, "manage.py", "queuestats", "--json", "shop.OrderConfirmation",
         "shop.OrderEvent"],
        cwd=EXAMPLE, env=config.environ(WORKER), capture_output=True, text=True, timeout=120,
        check=True,
    )  # fmt: skip
    left = {}
    for queue in json.loads(done.stdout)["queues"]:
        for state in ("ready", "scheduled", "leased", "expired", "failed"):
            if queue[state]:
                left[f"{queue['queue']} {state}"] = int(queue[state])
    return left


def verify(config: ShopConfig, acknowledged: set[int], kills: int) -> Verdict:
    """Every check, on the shop's database and outbox; ``acknowledged``: the orders the clients
    got a 201 for; ``kills``: the SIGKILLs the worker took."""
    with psycopg.connect(config.dsn, autocommit=True) as conn:
        row = conn.execute(CHECKS).fetchone()
        assert row is not None
        orders, c_lost, c_stray, c_again, s_lost, s_stray, s_total = (int(n) for n in row)
        committed = {int(i) for (i,) in conn.execute("SELECT id FROM shop_order")}
    sent = emails(config.logs / "outbox")
    return Verdict(
        orders=orders,
        acknowledged_missing=len(acknowledged - committed),
        committed_unacknowledged=len(committed - acknowledged),
        confirmations_lost=c_lost,
        confirmations_stray=c_stray,
        confirmations_redelivered=c_again,
        emails_sent=sum(sent.values()),
        emails_lost=len(committed - set(sent)),
        emails_duplicated=sum(n - 1 for n in sent.values() if n > 1),
        sales_lost=s_lost,
        sales_stray=s_stray,
        sales_wrong_total=s_total,
        left_in_queues=left_in_queues(config),
        emails_duplicates_allowed=kills * config.worker_concurrency,
    )


def drained(config: ShopConfig) -> bool:
    """Whether every committed order has its confirmation and its sale (the worker is done)."""
    with psycopg.connect(config.dsn, autocommit=True) as conn:
        row = conn.execute(CHECKS).fetchone()
    assert row is not None
    return int(row[1]) == 0 and int(row[4]) == 0
