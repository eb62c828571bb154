"""``@handler`` of the SQLAlchemy adapter: what it registers and what it refuses."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from dbqueue.errors import InvalidArgument
from dbqueue_sa import QueueMixin, RingQueueMixin
from dbqueue_sa.handlers import DEFAULT_BATCH_SIZE, handler, handlers, unregister
from tests.sqlalchemy import handlers_app
from tests.sqlalchemy.models import Base, Job, Tick

pytestmark = pytest.mark.sqlalchemy


class ErrandBase(DeclarativeBase):
    """Classes of this module only: registering their handlers touches no shared queue."""


class Errand(QueueMixin, ErrandBase):
    __tablename__ = "sa_errand"
    what: Mapped[str]


class Note(ErrandBase):
    """Mapped, but not a queue."""

    __tablename__ = "sa_note"
    id: Mapped[int] = mapped_column(primary_key=True)


class AbstractQueue(QueueMixin, ErrandBase):
    __abstract__ = True


@pytest.fixture
def errand_free() -> Iterator[None]:
    unregister(Errand)
    yield
    unregister(Errand)


def test_importing_a_module_registers_its_handlers() -> None:
    registered = handlers()
    assert registered[(Job, None)].func is handlers_app.record_job
    assert (registered[(Job, None)].batch, registered[(Job, None)].batch_size) == (False, 10)
    assert (registered[(Tick, None)].batch, registered[(Tick, None)].batch_size) == (True, 4)
    assert (
        registered[(Job, None)].label == "Job (sa_job) -> tests.sqlalchemy.handlers_app.record_job"
    )
    assert registered[(Tick, None)].model is Tick


@pytest.mark.usefixtures("errand_free")
def test_the_decorator_returns_the_function_and_defaults_the_batch_size() -> None:
    def run(errands: list[Errand]) -> None: ...

    assert handler(Errand, batch=True)(run) is run
    registered = handlers()[(Errand, None)]
    assert (registered.func, registered.batch, registered.batch_size) == (
        run,
        True,
        DEFAULT_BATCH_SIZE,
    )


@pytest.mark.usefixtures("errand_free")
def test_a_second_handler_for_one_queue_is_refused() -> None:
    @handler(Errand)
    def first(errand: Errand) -> None: ...

    already = r"Errand \(sa_errand\) already has a handler \(Errand \(sa_err"
    with pytest.raises(InvalidArgument, match=already):

        @handler(Errand)
        def second(errand: Errand) -> None: ...

    assert handlers()[(Errand, None)].func is first


@pytest.mark.usefixtures("errand_free")
def test_registering_the_same_function_again_is_harmless() -> None:
    def handle(errand: Errand) -> None: ...

    handler(Errand)(handle)
    handler(Errand, batch_size=3)(handle)  # a module imported twice, say
    assert handlers()[(Errand, None)].batch_size == 3


def test_a_ring_class_takes_a_handler() -> None:
    class Beat(RingQueueMixin, ErrandBase):
        __tablename__ = "sa_beat"
        __queue_options__ = {"capacity": 4}
        n: Mapped[int]

    try:
        handler(Beat)(print)
        assert handlers()[(Beat, None)].func is print
    finally:
        unregister(Beat)


@pytest.mark.parametrize(
    "model",
    [Note, Base, ErrandBase, QueueMixin, RingQueueMixin, AbstractQueue, object, "sa_job", None],
)
def test_only_mapped_queue_classes_take_handlers(model: Any) -> None:
    with pytest.raises(InvalidArgument, match="needs a mapped QueueMixin or RingQueueMixin"):
        handler(model)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"batch": "yes"}, r"batch=\.\.\.\) must be a bool, got 'yes'"),
        ({"batch": 1}, r"batch=\.\.\.\) must be a bool, got 1"),
        ({"batch_size": 0}, r"batch_size=\.\.\.\) must be a positive int, got 0"),
        ({"batch_size": -5}, "got -5"),
        ({"batch_size": True}, "got True"),
        ({"batch_size": "10"}, "got '10'"),
        ({"batch_size": 2.5}, "got 2.5"),
    ],
)
def test_bad_options_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        handler(Errand, **options)
    assert (Errand, None) not in handlers()
