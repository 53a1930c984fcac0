"""How ``workqueue`` schedules run operations and ``django.tasks`` tasks (registered in ``ready()``).

A scheduled run's operation id is the slot's key (``{schedule}:{slot}``), and so is its work
item's key: starting it twice returns the same operation, which is what lets the firing pass
be retried safely.
"""

from __future__ import annotations

import dataclasses
from typing import cast

from django.db import DEFAULT_DB_ALIAS
from django.utils.module_loading import import_string

from operations.exceptions import OperationsError


def _request(kind: str, raw):
    from operations.registry import registry

    definition = registry.get(kind)
    rtype = definition.request_type
    if rtype is not None and isinstance(raw, dict) and dataclasses.is_dataclass(rtype):
        return rtype(**raw)
    return raw


def fire_operation(schedule: dict, key: str, *, using: str = DEFAULT_DB_ALIAS) -> tuple[str, str]:
    """Start the schedule's operation under the id ``key``; return (queue, key) of its work item."""
    from operations.service import start

    op = start(schedule["kind"], _request(schedule["kind"], schedule.get("request")), id=key, using=using)
    return op.queue, op.id


def check_operation(schedule: dict) -> list[str]:
    from operations.registry import registry

    kind = cast(str, schedule.get("kind"))  # anything else is an unknown kind, said as such
    try:
        registry.get(kind).encode(_request(kind, schedule.get("request")))
    except OperationsError as exc:
        return [str(exc)]
    except TypeError as exc:
        return [f"the request does not fit kind {kind!r}: {exc}"]
    return []


def _task(path: str):
    from operations.task_backend import OperationsBackend

    try:
        task = import_string(path)
    except ImportError as exc:
        raise ValueError(f"cannot import task {path!r}: {exc}")
    backend = getattr(task, "get_backend", None)
    if backend is None:
        raise ValueError(f"{path!r} is not a django.tasks task (decorate it with @task)")
    backend = backend()
    if not isinstance(backend, OperationsBackend):
        raise ValueError(
            f"task {path!r} uses backend {type(backend).__name__}; scheduled tasks need "
            "operations.task_backend.OperationsBackend"
        )
    return task, backend


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
