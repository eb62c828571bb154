"""The chore that pushes the ticks of the periodic schedules (see :mod:`dbqueue.scheduler`),
those of the handlers and those of the queues they serve, on the maintenance thread."""

from __future__ import annotations

from collections.abc import Sequence

from dbqueue.errors import InvalidArgument
from dbqueue.scheduler import CHECK_EVERY, Clock, Scheduler, ScheduleTarget
from dbqueue.schedules import Schedule, schedules_of
from dbqueue.worker.consumer import Chore, Consumer
from dbqueue.worker.quiet import Throttle


def schedule_chores(
    consumers: Sequence[Consumer], clock: Clock, quiet: Throttle | None = None
) -> list[Chore]:
    """A chore pushing the ticks of the schedules declared on the consumers' handlers, and on
    their queues (the queue option ``schedule``), into those queues (none without schedules);
    a push that keeps failing is logged through ``quiet`` (the worker's log throttle).
    Raises InvalidArgument for a schedule whose queue cannot take a scheduled push,
    InvalidSpec for two schedules of one name."""
    pairs = []
    queues_seen: set[int] = set()
    for consumer in consumers:
        declared: list[Schedule] = list(schedules_of(consumer.handle))
        # A queue served by two consumers of this worker is scheduled once.
        if id(consumer.queue) not in queues_seen:
            queues_seen.add(id(consumer.queue))
            declared.extend(getattr(consumer.queue, "queue_schedules", ()))
        for schedule in declared:
            target = consumer.queue
            if not hasattr(target, "push_if_claimed"):
                raise InvalidArgument(
                    f"schedule {schedule.name!r}: queue {target.name} cannot take scheduled "
                    f"pushes (its worker queue has no push_if_claimed)"
                )
            pairs.append((schedule, _as_target(target)))
    if not pairs:
        return []
    scheduler = Scheduler(pairs, clock=clock, quiet=quiet)
    return [Chore("schedules", CHECK_EVERY, scheduler.run, scheduler.disconnect)]


def _as_target(queue: object) -> ScheduleTarget:
    return queue  # type: ignore[return-value]  # checked by hasattr above
