"""Take the admin screenshots in docs/images with headless Chromium (Debian's ``chromium``).

    .venv/bin/python scripts/admin_screenshots.py   # or: make screenshots

Sets up the example shop on a throw-away SQLite database (orders, queued confirmations,
some failed with tracebacks), serves it with ``runserver``, and saves a PNG of each page in a
window 1280 px wide.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "images"
PORT = 8765
#: The window's width: the narrowest the admin's pages are made to fit without scrolling
#: sideways (tests/django/test_admin_layout.py checks it).
WIDTH = 1280
PAGES = {
    "admin-overview.png": "/admin/dbqueue_django/queueoverview/",
    "admin-changelist.png": "/admin/shop/orderconfirmation/",
    "admin-failed.png": "/admin/shop/orderconfirmation/?state=failed",
    "admin-item.png": "",  # a failed item's page, found once the data exists
    "admin-ring-failed.png": "/admin/shop/ordereventfailed/",
}
#: Window height per page (the item page is tall: its buttons are below the traceback).
HEIGHTS = {"admin-item.png": 1240}


def setup_data() -> int:
    """Migrate, create the admin, queue confirmations, fail three for good (and two order
    events of the ring); a failed confirmation's id."""
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from shop.models import OrderConfirmation, OrderEvent

    call_command("migrate", verbosity=0)
    get_user_model().objects.create_superuser("admin", "admin@example.com", "unused")
    queue = OrderConfirmation.queue
    failing = queue.push_many(
        [{"order_id": 900 + i, "email": f"bounce{i}@example.com"} for i in range(3)]
    )
    for _ in range(queue.spec.options.max_attempts):
        queue.fail(queue.pop_batch(3), SMTP_TRACEBACK, delay=timedelta(0))
    queue.push_many(
        [{"order_id": 1000 + i, "email": f"customer{i}@example.com"} for i in range(40)]
    )
    queue.push(order_id=2000, email="later@example.com", delay=timedelta(hours=2))
    queue.pop_batch(2)  # two leased, as if a worker were busy with them
    queue.push(order_id=2001, email="vip@example.com", priority=10)
    events = OrderEvent.queue
    events.push_many([{"order_id": 900 + i, "total": Decimal("19.90")} for i in range(2)])
    events.fail(events.pop_batch(2), LEDGER_TRACEBACK, retry=False)
    events.push_many([{"order_id": 1000 + i, "total": Decimal("42.00")} for i in range(5)])
    return failing[0]


#: The tracebacks the failed items show, as a worker stores them: written out, so the pictures
#: name the shop's handlers rather than this script.
SMTP_TRACEBACK = """Traceback (most recent call last):
  File "/srv/shop/shop/handlers.py", line 16, in send_confirmation
    send_mail(
  File "/srv/shop/venv/lib/python3.12/site-packages/django/core/mail/message.py", line 300, in send
    return self.get_connection(fail_silently).send_messages([self])
ConnectionRefusedError: [Errno 111] Connection refused: smtp.example.com:587
"""
LEDGER_TRACEBACK = """Traceback (most recent call last):
  File "/srv/shop/shop/handlers.py", line 29, in record_sales
    raise LookupError(f"order #{event.order_id} is not in the ledger yet")
LookupError: order #900 is not in the ledger yet
"""


def main() -> int:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("chromium is not installed: make browser (Debian's chromium)")
    tmp = Path(tempfile.mkdtemp(prefix="dbqueue-shots-"))
    paths = [ROOT, ROOT / "example_project", ROOT / "scripts"]
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp / 'shop.sqlite3'}",
        "DJANGO_SETTINGS_MODULE": "screenshots.settings",
        # This checkout's packages first, whatever the venv has installed.
        "PYTHONPATH": os.pathsep.join(str(p) for p in paths),
    }
    os.environ.update(env)
    sys.path[:0] = [str(p) for p in paths]
    failed_id = setup_data()
    PAGES["admin-item.png"] = f"/admin/shop/orderconfirmation/{failed_id}/change/"
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "example_project" / "manage.py"), "runserver",
         f"127.0.0.1:{PORT}", "--noreload", "--insecure"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait(f"http://127.0.0.1:{PORT}/admin/")
        OUT.mkdir(parents=True, exist_ok=True)
        for name, path in PAGES.items():
            target = OUT / name
            subprocess.run(
                [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                 f"--window-size={WIDTH},{HEIGHTS.get(name, 800)}", f"--screenshot={target}",
                 f"http://127.0.0.1:{PORT}{path}"],
                check=True, capture_output=True, timeout=120,
            )  # fmt: skip
            print(f"{target.relative_to(ROOT)}: {path}")
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _wait(url: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())
