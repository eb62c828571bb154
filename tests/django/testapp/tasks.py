"""Django Tasks for the Tasks backend tests (module level, as Django requires)."""

from __future__ import annotations

from typing import Any

from django.tasks import TaskContext, task

#: Set to make flaky() fail once (the tests reset it).
FAIL_NEXT: list[bool] = []


@task
def add(a: int, b: int) -> int:
    return a + b


@task(queue_name="emails", priority=10)
def shout(text: str) -> dict[str, Any]:
    return {"text": text.upper(), "parts": (1, 2)}  # a tuple comes back as a list


@task
def broken(reason: str) -> None:
    raise ValueError(reason)


@task
def flaky() -> str:
    if FAIL_NEXT:
        FAIL_NEXT.pop()
        raise RuntimeError("first attempt fails")
    return "done"


@task(takes_context=True)
def with_context(context: TaskContext, label: str) -> dict[str, Any]:
    return {"label": label, "attempt": context.attempt, "id": context.task_result.id}


@task
async def async_double(n: int) -> int:
    return n * 2


@task
def unserialisable_result() -> object:
    return object()


@task
def interrupted() -> None:
    raise KeyboardInterrupt("the task's own code raised it")
