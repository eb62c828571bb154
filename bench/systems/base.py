"""What a benchmarked system implements. One class per system, registered by name.

The producer side (push) runs in the harness process; the consumer side (drain, cycle) runs
in worker processes started by the harness (``python -m bench.worker``), as a real
deployment's workers would, so that N workers really use N processes.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self

if TYPE_CHECKING:
    from bench.env import BenchEnv

#: One 300-character string payload per message, as the peers were measured with.
PAYLOAD = "x" * 300

REGISTRY: dict[str, type[System]] = {}
#: How long an idle polling consumer sleeps before asking again (as the thin reference does).
IDLE_SLEEP = 0.01


def stamped() -> str:
    """A 300-character payload that starts with the moment it was made (perf_counter, the
    system-wide monotonic clock on Linux): the consumer's handler computes the latency."""
    return f"{time.perf_counter():.9f}".ljust(300, "x")


def stamp_of(payload: str) -> float:
    return float(payload[:20].rstrip("x"))


@dataclass
class Tally:
    """What a consumer did: how many items, when the first and last were handled, and how
    long each compaction it ran took (seconds: waiting for the lock, then holding it)."""

    count: int = 0
    first: float = 0.0
    last: float = 0.0
    compactions: list[float] = field(default_factory=list)

    def add(self, n: int) -> None:
        if n <= 0:
            return
        now = time.perf_counter()
        if self.count == 0:
            self.first = now
        self.count += n
        self.last = now


class Popped(Protocol):
    """An item a front's pop returns."""

    @property
    def payload(self) -> Any: ...


def serve_loop[T: Popped](
    pop: Callable[[], list[T]],
    ack: Callable[[list[T]], object],
    seconds: float,
    handle: Callable[[str], None],
) -> Tally:
    """The consumer loop of the fronts' :meth:`System.serve`: ``pop()`` a batch of items
    (waiting :data:`IDLE_SLEEP` when there is none), ``handle`` each one's payload, ``ack``
    them; for ``seconds``."""
    tally = Tally()
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        items = pop()
        if not items:
            time.sleep(IDLE_SLEEP)
            continue
        for item in items:
            handle(item.payload)
        ack(items)
        tally.add(len(items))
    return tally


class System(ABC):
    """A queue under test. Subclasses set the class attributes and implement the methods."""

    name: ClassVar[str]
    label: ClassVar[str]
    #: Workloads this system takes part in (names from bench.workloads).
    workloads: ClassVar[frozenset[str]] = frozenset({"push_single", "push_batch", "drain"})
    #: Drain batch sizes the system allows (1 = one item per fetch).
    drain_batches: ClassVar[tuple[int, ...]] = (1, 10, 100)
    #: The drain backlog of a full run. Slow systems (tens of messages per second) drain a
    #: smaller one, which the report states; 50,000 would take them an hour per figure.
    drain_backlog: ClassVar[int] = 50_000
    #: The tables that hold its messages (sizes and dead tuples for the bloat soak).
    tables: ClassVar[tuple[str, ...]] = ()
    #: The database this system's tables live in (shared by systems that share a Django site).
    database: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            REGISTRY[cls.name] = cls

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    @classmethod
    def db_name(cls) -> str:
        """The suffix of this system's database name (``BenchEnv.database``)."""
        return cls.database or cls.name.replace("-", "_")

    @classmethod
    def create(cls, env: BenchEnv) -> Self:
        """Make the database and schema; return the system ready to run."""
        system = cls(env.database(cls.db_name()))
        system.install()
        return system

    @abstractmethod
    def install(self) -> None:
        """Create the schema (tables, functions) the system needs, in its fresh database."""

    @abstractmethod
    def reset(self) -> None:
        """Remove every message (between repetitions)."""

    def close(self) -> None:  # noqa: B027 - most systems hold nothing to release
        """Release connections held by the producer side."""

    @abstractmethod
    def push_single(self, n: int) -> None:
        """Push ``n`` messages, one transaction each."""

    def push_batch(self, n: int, batch: int) -> None:
        """Push ``n`` messages in batches of ``batch`` (systems with a batch API)."""
        raise NotImplementedError(f"{self.name} has no batch push")

    def fill(self, n: int) -> None:
        """Create a backlog of ``n`` messages as fast as the system allows."""
        self.push_batch(n, 1000)

    @abstractmethod
    def depth(self) -> int:
        """Messages not yet consumed (asked on a separate connection)."""

    def expect(self, depth: int) -> None:  # noqa: B027 - unbounded queues need nothing
        """Be told, before :meth:`reset`, the most messages the next runs keep in the queue at
        once. A bounded queue (the ring) sizes itself from it at its next reset."""

    def popper(self) -> System:
        """The popper of a client pair: this system on a connection of its own (the pusher
        keeps this one). A system whose connection is per thread rather than per instance
        (Django's) overrides it."""
        return type(self)(self.dsn)

    # -- consumer side: called in a worker process --------------------------------------------

    @abstractmethod
    def drain(self, batch: int) -> Tally:
        """Consume with a no-op handler until the queue is empty; count what was handled."""

    def take(self, batch: int) -> int:
        """Pop up to ``batch`` messages and acknowledge them; return how many."""
        raise NotImplementedError(f"{self.name} has no cycle workload")

    def push_some(self, batch: int) -> None:
        """Push ``batch`` messages: a single push for one, else one batch call."""
        if batch == 1:
            self.push_payload(PAYLOAD)
        else:
            self.push_batch(batch, batch)

    def cycle_once(self, batch: int) -> int:
        """Push a batch, then pop and acknowledge a batch; return how many were consumed."""
        self.push_some(batch)
        return self.take(batch)

    def cycle(self, batch: int, seconds: float, popper: System | None = None) -> Tally:
        """Push a batch and take a batch, again and again for ``seconds`` (the end-to-end
        workloads): on this one connection, or popping on ``popper``'s (a client pair)."""
        take = self.take if popper is None else popper.take
        tally = Tally()
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            self.push_some(batch)
            tally.add(take(batch))
        return tally

    def churn(self, n: int, batch: int = 1000) -> None:
        """Pass ``n`` messages through the queue (the bloat soak)."""
        done = 0
        while done < n:
            moved = self.cycle_once(min(batch, n - done))
            if not moved:
                raise RuntimeError(f"{self.name}: a cycle consumed nothing")
            done += moved

    # -- steady state: producers and long-running consumers ------------------------------------

    def push_payload(self, payload: str) -> None:
        """Push one message carrying ``payload``, in its own transaction."""
        raise NotImplementedError(f"{self.name} has no steady-state producer")

    def serve(self, batch: int, seconds: float, handle: Callable[[str], None]) -> Tally:
        """Run as a long-lived consumer for ``seconds`` (waiting when the queue is empty, as
        the system's own worker does), calling ``handle(payload)`` when each message's
        handler starts; the handler is otherwise a no-op."""
        raise NotImplementedError(f"{self.name} has no steady-state consumer")
