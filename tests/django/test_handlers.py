"""``@handler``: registration rules and autodiscovery of ``handlers`` modules."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured

from dbqueue_django import handler
from dbqueue_django.handlers import DEFAULT_BATCH_SIZE, autodiscover, handlers, unregister
from dbqueue_django.models import QueueModel
from tests.django.testapp import handlers as testapp_handlers
from tests.django.testapp.models import Job, Ping

pytestmark = pytest.mark.django


@pytest.fixture
def job_handler_free() -> Iterator[None]:
    unregister(Job)
    yield
    unregister(Job)


def test_autodiscover_finds_the_handlers_module_of_each_app() -> None:
    autodiscover()
    found = handlers()[(Ping, None)]
    assert found.func is testapp_handlers.record_ping
    assert found.batch is False
    assert found.batch_size == 10
    assert found.label == "testapp.Ping -> tests.django.testapp.handlers.record_ping"


@pytest.mark.usefixtures("job_handler_free")
def test_a_batch_handler_and_the_default_batch_size() -> None:
    @handler(Job, batch=True)
    def many(jobs: list[Job]) -> None: ...

    registered = handlers()[(Job, None)]
    assert registered.batch is True
    assert registered.batch_size == DEFAULT_BATCH_SIZE
    assert many.__name__ == "many"  # the decorator returns the function itself


@pytest.mark.usefixtures("job_handler_free")
def test_a_second_handler_for_one_queue_is_refused() -> None:
    @handler(Job)
    def first(job: Job) -> None: ...

    with pytest.raises(ImproperlyConfigured, match=r"testapp\.Job already has a handler"):

        @handler(Job)
        def second(job: Job) -> None: ...

    assert handlers()[(Job, None)].func is first


@pytest.mark.usefixtures("job_handler_free")
def test_registering_the_same_function_again_is_harmless() -> None:
    def handle(job: Job) -> None: ...

    handler(Job)(handle)
    handler(Job)(handle)  # a module imported twice
    assert handlers()[(Job, None)].func is handle


@pytest.mark.parametrize("model", [User, QueueModel, "testapp.Job", None])
def test_only_concrete_queue_models_take_handlers(model: Any) -> None:
    with pytest.raises(ImproperlyConfigured, match="concrete QueueModel"):
        handler(model)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch": "yes"}, "batch"),
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": True}, "batch_size"),
        ({"batch_size": 2.5}, "batch_size"),
    ],
)
def test_bad_handler_options_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        handler(Job, **kwargs)
