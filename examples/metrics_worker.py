"""A worker serving Prometheus metrics, without a framework (docs/howto/metrics.md).

Run it from the repository root (needs the ``metrics`` extra)::

    python -m examples.metrics_worker --port 9464

It creates a queue in a SQLite file, pushes 20 emails (every fifth one fails), starts a worker
with ``metrics_port``, scrapes its endpoint once the emails are handled, prints the
``dbqueue_*`` lines and stops. With ``--serve`` it keeps running for Prometheus to scrape
``http://localhost:9464/metrics`` until Ctrl-C.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from dbqueue import Field, FieldKind, Message, QueueOptions, QueueSpec, SplitQueue, get_dialect
from dbqueue.drivers.sqlite import SqliteExecutor, connect
from dbqueue.schema import create_statements
from dbqueue.worker import Consumer, Worker
from dbqueue.worker_queue import ExecutorQueue

SPEC = QueueSpec(
    "emails", (Field("to", FieldKind.TEXT), Field("n", FieldKind.INTEGER)), QueueOptions()
)


def send(message: Message) -> None:
    """The handler: every fifth email fails (and is tried again after its back-off)."""
    if message.payload["n"] % 5 == 4:
        raise ConnectionError("the mail server said no")


def scrape(url: str) -> str:
    with urllib.request.urlopen(url) as response:  # noqa: S310  # our own http://localhost
        return str(response.read().decode())


def attempts(text: str) -> float:
    """Handled items and failed attempts, as the scrape counted them."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name in ("dbqueue_handled", "dbqueue_failed")
        for sample in family.samples
        if sample.name.endswith("_total")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=9464, help="metrics port (0: any free one)")
    parser.add_argument("--serve", action="store_true", help="keep serving until Ctrl-C")
    args = parser.parse_args()
    logging.getLogger("dbqueue").setLevel(logging.ERROR)  # not each planned failure's warning

    path = str(Path(tempfile.mkdtemp()) / "queue.sqlite3")
    queue = SplitQueue(SPEC, get_dialect("sqlite"))
    ex = SqliteExecutor(connect(path))
    for statement in create_statements(SPEC, queue.dialect):
        ex.execute(statement, {})
    queue.push_many(ex, [{"to": f"user{n}@example.com", "n": n} for n in range(20)])

    # Each worker thread, and the metrics scrapes, open their own connection.
    binding = ExecutorQueue(queue, lambda: SqliteExecutor(connect(path)))
    worker = Worker([Consumer(binding, send)], metrics_port=args.port, summary_every=0)
    thread = threading.Thread(target=worker.run, kwargs={"handle_signals": False})
    thread.start()
    try:
        while worker.metrics is None:  # until the server listens
            time.sleep(0.05)
        url = f"http://localhost:{worker.metrics.port}/metrics"
        text = scrape(url)
        while attempts(text) < 20:  # until every email had its first attempt
            time.sleep(0.1)
            text = scrape(url)
        print("\n".join(line for line in text.splitlines() if line.startswith("dbqueue_")))
        if args.serve:
            print(f"serving {url} until Ctrl-C")
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        worker.stop()
        thread.join()


if __name__ == "__main__":
    main()
