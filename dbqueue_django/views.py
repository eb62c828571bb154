"""Prometheus metrics of the queues, served by the web processes (the ``metrics`` extra).

Mount :func:`metrics` in a URLconf (``path("metrics/", metrics)``): a scrape reads each queue
model's depth by state, the age of its oldest ready item and how many items were ever pushed,
from its database (as the router chooses it), at most once every
:data:`~dbqueue.metrics.CACHE_FOR` seconds per process. The counters of handled and failed
items and the handler durations live in the workers: scrape their ``--metrics-port``.
Protect the URL as the application's other internal pages are (a network policy, or a view
decorator of your own): it names the queues and their sizes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.http import HttpRequest, HttpResponse

from dbqueue.errors import MetricsUnavailable
from dbqueue.metrics import CACHE_FOR, DepthCollector, QueueDepth, read_depth, require_prometheus
from dbqueue_django.models import BaseQueueModel, queue_models
from dbqueue_django.worker import queue_label


def read_models(models: Iterable[type[BaseQueueModel]]) -> list[QueueDepth]:
    """Each model's reading on its database (a queue with consumer groups: each group's),
    each in a savepoint of its own: a queue whose tables are missing reads as down without
    breaking the request's transaction."""
    readings = []
    for model in models:
        whole: Any = model.queue
        groups: tuple[str, ...] = whole.spec.options.groups
        for queue in [whole.group(g) for g in groups] or [whole]:
            # The name the worker logs it by (app_label.Model[group]@alias), so the view's
            # gauges and the worker's counters line up.
            readings.append(_reading(queue, f"{queue_label(queue)}@{queue.alias}"))
    return readings


def _reading(queue: Any, label: str) -> QueueDepth:
    """The reading of ``queue`` (a model's, or a consumer group's) on its alias."""

    def stats() -> Any:
        with transaction.atomic(using=queue.alias):
            return queue.stats()

    def pushed() -> int:
        with transaction.atomic(using=queue.alias):
            return int(queue.pushed())

    return read_depth(label, stats, pushed)


def metrics_view(
    models: Sequence[type[BaseQueueModel]] | None = None, *, cache_for: float = CACHE_FOR
) -> Callable[[HttpRequest], HttpResponse]:
    """A view serving the metrics of ``models`` (default: every installed queue model) in
    Prometheus's text format, each reading serving scrapes for ``cache_for`` seconds."""
    collector = DepthCollector(
        lambda: read_models(models if models is not None else queue_models()),
        cache_for=cache_for,
    )
    registry: Any = None
    lock = threading.Lock()

    def view(request: HttpRequest) -> HttpResponse:
        nonlocal registry
        try:
            require_prometheus()
        except MetricsUnavailable as exc:
            raise ImproperlyConfigured(str(exc)) from None
        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

        with lock:  # two first requests at once must not register the collector twice
            if registry is None:
                registry = CollectorRegistry(auto_describe=True)
                registry.register(collector)
        return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)

    return view


#: The view of every installed queue model: ``path("metrics/", metrics)``.
metrics = metrics_view()
