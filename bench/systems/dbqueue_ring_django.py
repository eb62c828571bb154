"""dbqueue's ring queue through the Django manager (``Model.queue`` of a ``RingQueueModel``).

Unlike ``dbqueue-ring``, whose ring the harness rebuilds at each workload's size, a Django
model declares one capacity in its ``QueueOptions`` and its migration preallocates the slots:
the system runs only the workloads that fit (see ``bench.djangoapp.models.BenchTick``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

from bench.systems.dbqueue_django import DBQueueDjango

if TYPE_CHECKING:
    from bench.env import BenchEnv
    from dbqueue_django.models import BaseQueueModel


class DBQueueRingDjango(DBQueueDjango):
    name = "dbqueue-ring-django"
    label = "dbqueue ring queue, Django manager"
    # The workloads whose depth fits BenchTick's fixed capacity.
    workloads = frozenset({"cycle", "pairs", "steady", "bloat"})
    tables = ("benchapp_benchtick", "benchapp_benchtick_failed")

    @staticmethod
    def queue_model() -> type[BaseQueueModel]:
        from bench.djangoapp.models import BenchTick

        return BenchTick

    @classmethod
    def create(cls, env: BenchEnv) -> Self:
        system = super().create(env)
        env.notes.append(
            f"{cls.name}: one ring of {system.capacity:,} slots (BenchTick's declared capacity) "
            "for every workload it runs; the ring figures of dbqueue-ring are for rings sized "
            "per workload"
        )
        return system

    @property
    def capacity(self) -> int:
        """The slots the model declares (its migration made that many)."""
        capacity = self.queue.spec.options.capacity
        assert capacity is not None  # a ring model's spec always has one
        return capacity

    def expect(self, depth: int) -> None:
        """Refuse a workload the declared ring cannot hold: its pushes would wait for a free
        slot, then fail with QueueFull, and the figures would measure that instead."""
        if depth > self.capacity:
            raise ValueError(
                f"{self.name}: the workload keeps up to {depth:,} messages in the queue, more "
                f"than the {self.capacity:,} slots BenchTick declares (QueueOptions.capacity in "
                "bench/djangoapp/models.py); raise it and run makemigrations, or leave the "
                "workload out of the system's workloads"
            )

    def reset(self) -> None:
        """Empty every slot and the failed table. A TRUNCATE would remove the preallocated
        slots; the slots keep their numbers, so the counters need no reset (a popper walks
        past the number of a purged message)."""
        self.queue.purge()
