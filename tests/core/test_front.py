"""The front layer both fronts stand on (dbqueue.front), with a front of the test's own over a
bare driver connection: what a front supplies is only its binding, its payload names and its
instances, and every operation is the one definition the Django and SQLAlchemy fronts share
(the conformance suite runs those)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from dbqueue import (
    QueueOptions,
    QueueSpec,
    RingQueue,
    SplitQueue,
    State,
    TransactionStateError,
    get_dialect,
)
from dbqueue.drivers import executor_for
from dbqueue.executor import Executor
from dbqueue.front import AnyQueue, FrontQueue, RingFrontQueue, shared_core
from dbqueue.schema import create_ring_statements, create_statements, drop_ring_statements
from tests.conformance.spec import JOB_FIELDS, JOB_OPTIONS, RING_OPTIONS


@dataclass
class Job:
    """The test front's model: its columns, and what a pop adds."""

    row: dict[str, Any]
    extras: dict[str, Any]


class TestFront(FrontQueue[Job]):
    """A front over one driver connection, whose keyword ``subject`` names the column
    ``name``."""

    __test__ = False

    def __init__(self, spec: QueueSpec, ex: Executor, database: str) -> None:
        self._spec, self.ex, self.database = spec, ex, database

    @property
    def spec(self) -> QueueSpec:
        return self._spec

    def _bind(self) -> tuple[AnyQueue, Executor]:
        core = shared_core(type(self), self.database, self.spec, self.ex.dialect, self.core_class)
        return core, self.ex

    def _payload(self, values: Any) -> dict[str, Any]:
        return {"name" if k == "subject" else k: v for k, v in values.items()}

    def _instance(self, row: dict[str, Any], extras: dict[str, Any]) -> Job:
        return Job(row, extras)


class TestRingFront(TestFront, RingFrontQueue[Job]):
    __test__ = False


def connect(backend: str, request: pytest.FixtureRequest) -> Any:
    if backend == "postgresql":
        return psycopg.connect(request.getfixturevalue("pg_dsn"), autocommit=True)
    from dbqueue.drivers.sqlite import connect as sqlite_connect

    return sqlite_connect(request.getfixturevalue("sqlite_path"))


BACKENDS = [
    pytest.param("postgresql", marks=pytest.mark.postgresql, id="pg"),
    pytest.param("sqlite", marks=pytest.mark.sqlite, id="sqlite"),
]


@contextmanager
def front_on[F: TestFront](
    request: pytest.FixtureRequest, table: str, cls: type[F], options: QueueOptions
) -> Iterator[F]:
    """A queue of ``cls`` (its tables created) on the backend the test is parametrized with."""
    backend = request.param
    conn, dialect = connect(backend, request), get_dialect(backend)
    spec = QueueSpec(table, JOB_FIELDS, options)
    ex = executor_for(dialect, conn)
    ring = options.capacity is not None
    for statement in (create_ring_statements if ring else create_statements)(spec, dialect):
        ex.execute(statement, {})
    yield cls(spec, ex, f"{backend}:{table}")
    if ring and not isinstance(conn, sqlite3.Connection):  # counters outlive the test's schema
        for statement in drop_ring_statements(spec, dialect):
            ex.execute(statement, {})
    conn.close()


@pytest.fixture(params=BACKENDS)
def split(request: pytest.FixtureRequest, table_name: str) -> Iterator[TestFront]:
    with front_on(request, table_name, TestFront, JOB_OPTIONS) as front:
        yield front


@pytest.fixture(params=BACKENDS)
def ring(request: pytest.FixtureRequest, table_name: str) -> Iterator[TestRingFront]:
    with front_on(request, table_name, TestRingFront, RING_OPTIONS) as front:
        yield front


def test_a_split_front_pushes_in_its_names_and_pops_instances(split: TestFront) -> None:
    first = split.push(subject="hello", n=1)
    assert split.push_many([{"subject": "again", "n": 2}]) == [first + 1]
    (job, other) = split.pop_batch(5)
    assert (job.row["id"], job.row["name"], job.row["n"]) == (first, "hello", 1)
    # A split queue's meta columns are the instance's attributes, not its columns.
    assert set(job.extras) == {"attempts", "priority", "run_at", "lease_until"}
    assert job.extras["attempts"] == 1 and job.extras["lease_until"] is not None
    # The fronts' items carry id and attempts, which is all an ack needs (its token).
    token = [(job.row["id"], job.extras["attempts"])]
    assert split.ack(token) == [first]
    assert split.fail([(other.row["id"], 1)], ValueError("no"), retry=False) == {
        other.row["id"]: State.FAILED
    }
    assert split.stats()["failed"] == 1


def test_a_ring_front_pops_slot_rows_and_checks_its_capacity(ring: TestRingFront) -> None:
    number = ring.push(subject="hello", n=1)
    (job,) = ring.pop_batch(1)
    capacity = ring.spec.options.capacity
    assert capacity is not None
    assert (job.row["seq"], job.row["slot"], job.row["name"]) == (
        number,
        number % capacity,
        "hello",
    )
    assert job.extras == {}  # attempts and the lease are the slot's own columns
    ring.check()
    assert ring.ack([(job.row["seq"], job.row["attempts"])]) == [number]


def test_one_core_per_model_and_database(split: TestFront) -> None:
    core = split._bind()[0]
    assert split._bind()[0] is core
    again = TestFront(split.spec, split.ex, split.database)
    assert again._bind()[0] is core  # the ring's claims, the rendered SQL: shared
    elsewhere = TestFront(split.spec, split.ex, split.database + "-other")
    assert elsewhere._bind()[0] is not core
    assert isinstance(core, SplitQueue) and not isinstance(core, RingQueue)


def test_an_error_given_as_an_exception_is_stored_as_its_type_and_text(
    split: TestFront,
) -> None:
    item = split.push(subject="x", n=1)
    (job,) = split.pop_batch(1)
    split.fail([(item, job.extras["attempts"])], KeyError("gone"), retry=False)
    last_error = split.ex.execute(
        f'SELECT last_error FROM "{split.spec.table}" WHERE id = {item}', {}
    )[0][0]
    assert last_error == "KeyError: 'gone'"


@pytest.mark.postgresql
def test_at_most_once_in_a_callers_transaction_is_refused_by_the_core(
    request: pytest.FixtureRequest, table_name: str
) -> None:
    # A front that cannot tell whether its caller has a transaction open (the default
    # _own_transaction) leaves it to the core, which refuses an at-most-once pop there.
    conn = psycopg.connect(request.getfixturevalue("pg_dsn"), autocommit=True)
    dialect = get_dialect("postgresql")
    spec = QueueSpec(table_name, JOB_FIELDS, JOB_OPTIONS)
    ex = executor_for(dialect, conn)
    for statement in create_statements(spec, dialect):
        ex.execute(statement, {})
    front = TestFront(spec, ex, f"pg:{table_name}")
    front.push(subject="once", n=1)
    with conn.transaction(), pytest.raises(TransactionStateError):
        front.pop_batch(1, mode="at_most_once")
    assert [job.row["name"] for job in front.pop_batch(1, mode="at_most_once")] == ["once"]
    conn.close()
