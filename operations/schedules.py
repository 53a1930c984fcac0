"""How ``workqueue`` schedules run operations and ``django.tasks`` tasks (registered in ``ready()``).

A scheduled run's operation id is the slot's key (``{schedule}:{slot}``), and so is its work
item's key: starting it twice returns the same operation, which is what lets the firing pass
be retried safely.
"""

from __future__ import annotations

from typing import cast

from django.db import DEFAULT_DB_ALIAS

from operations.exceptions import OperationsError


def fire_operation(schedule: dict, key: str, *, using: str = DEFAULT_DB_ALIAS) -> tuple[str, str]:
    """Start the schedule's operation under the id ``key``; return (queue, key) of its work item."""
    from operations.service import start

    op = start(schedule["kind"], schedule.get("request"), id=key, using=using)
    return op.queue, op.id


def check_operation(schedule: dict) -> list[str]:
    """What ``operations.start`` would refuse in this schedule's kind and request (its own check,
    ``service.check_request``), so a bad request is refused when the schedule is saved rather
    than failing at every run."""
    from operations.service import check_request

    kind = cast(str, schedule.get("kind"))  # anything else is an unknown kind, said as such
    try:
        check_request(kind, schedule.get("request"))
    except OperationsError as exc:
        return [str(exc)]
    return []


def _task(path: str):
    """The registered task at ``path`` and its backend (ValueError naming what to fix). Only
    tasks defined with ``@task`` on an OperationsBackend are found; nothing is imported for it."""
    from operations.tasks.backend import registered_task

    task = registered_task(path) if isinstance(path, str) else None
    if task is None:
        raise ValueError(
            f"no django.tasks task {path!r} is registered: a schedule runs a @task defined on "
            "operations.tasks.backend.OperationsBackend, in an installed app's tasks module (or a module "
            "that app imports in AppConfig.ready()); give its module path, e.g. 'myapp.tasks.cleanup'"
        )
    return task, task.get_backend()


def fire_task(schedule: dict, key: str, *, using: str = DEFAULT_DB_ALIAS) -> tuple[str, str]:
    """Enqueue the schedule's task as the operation ``key``; return (queue, key) of its work item."""
    task, backend = _task(schedule["task"])
    result = backend.enqueue_as(task, list(schedule.get("args") or []), {}, id=key)
    return backend.queue_for(task.queue_name), result.id


def check_task(schedule: dict) -> list[str]:
    try:
        task, backend = _task(schedule.get("task") or "")
        backend.validate_task(task)
    except Exception as exc:
        return [str(exc)]
    return []
