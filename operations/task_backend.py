"""A ``django.tasks`` backend: Django's task API, stored as operations and run by ``runworker``.

    TASKS = {
        "default": {
            "BACKEND": "operations.task_backend.OperationsBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"MAX_ATTEMPTS": 3, "RETRY_DELAY": 10, "RETRY_BACKOFF": 2},
        }
    }

Each enqueued task is an operation (kind ``task.<module path>``) and its work item, written in
one transaction with the caller's writes. It therefore gets the operation's durability,
progress, cancellation, watcher, admin and HTTP surface, and the queue's crash recovery: a
task whose worker dies is retried by another worker, never left RUNNING. Works with Django 6
(``django.tasks``) and with Django 5.2 plus the ``django-tasks`` backport.

Beyond Django's API:

- retries with a ceiling and backoff, per backend (``OPTIONS``) or per task
  (``@task(max_attempts=5, retry_delay=30)``);
- ``cancel(result)`` asks a task to stop (pending: at once; running: when it looks);
- a task with ``takes_context=True`` gets ``context.reporter`` (progress, ``is_cancelled()``).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import dataclass

from django.core import checks
from django.utils.module_loading import import_string

from operations._tasks_compat import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
    task_enqueued,
    task_finished,
    task_started,
)
from operations.conf import DEFAULT_TASK_QUEUE_PREFIX
from operations.registry import KIND, MAX_KIND_LENGTH, Definition
from workqueue.conf import QUEUE_NAME

log = logging.getLogger("operations.tasks")

KIND_PREFIX = "task"
MAX_RETURN_BYTES = 16 * 1024

OPTION_DEFAULTS = {
    "MAX_ATTEMPTS": 3,  # attempts per task (a worker that dies counts as one); never unlimited
    "RETRY_DELAY": 10.0,  # seconds before the first retry
    "RETRY_BACKOFF": 2.0,  # each further retry waits this many times longer
    "MAX_RETRY_DELAY": 3600.0,  # upper bound on one retry's delay
    "QUEUE_PREFIX": DEFAULT_TASK_QUEUE_PREFIX,  # Django queue "emails" runs on workqueue queue "tasks.emails"
    "OWNER": "",  # owner recorded on the operations (scopes the HTTP surface)
}

STATUS = {
    "pending": TaskResultStatus.READY,
    "running": TaskResultStatus.RUNNING,
    "succeeded": TaskResultStatus.SUCCESSFUL,
    "failed": TaskResultStatus.FAILED,
    "cancelled": TaskResultStatus.FAILED,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationTask(Task):
    """Django's Task, plus optional per-task retry settings: ``@task(max_attempts=5, retry_delay=30)``."""

    max_attempts: int | None = None
    retry_delay: float | None = None
    retry_backoff: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationTaskContext(TaskContext):
    """Django's TaskContext, plus ``reporter``: progress and cancellation for the running task."""

    reporter: object = None

    def is_cancelled(self) -> bool:
        return bool(self.reporter is not None and self.reporter.is_cancelled())


def _problems(options: object) -> list[str]:
    if not isinstance(options, dict):
        return [f"OPTIONS must be a dict, not {type(options).__name__}"]
    problems = []
    unknown = sorted(set(options) - set(OPTION_DEFAULTS))
    if unknown:
        problems.append(
            f"unknown OPTIONS key(s) {', '.join(map(repr, unknown))}; known keys are {', '.join(OPTION_DEFAULTS)}"
        )
    attempts = options.get("MAX_ATTEMPTS", 1)
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        problems.append(f"OPTIONS['MAX_ATTEMPTS'] must be an integer >= 1 (never unlimited), not {attempts!r}")
    for key in ("RETRY_DELAY", "MAX_RETRY_DELAY"):
        value = options.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            problems.append(f"OPTIONS[{key!r}] must be a number of seconds >= 0, not {value!r}")
    backoff = options.get("RETRY_BACKOFF", 1)
    if isinstance(backoff, bool) or not isinstance(backoff, int | float) or backoff < 1:
        problems.append(f"OPTIONS['RETRY_BACKOFF'] must be a number >= 1, not {backoff!r}")
    for key in ("QUEUE_PREFIX", "OWNER"):
        if not isinstance(options.get(key, ""), str):
            problems.append(f"OPTIONS[{key!r}] must be a string")
    return problems


class OperationsBackend(BaseTaskBackend):
    """Store tasks as operations on the workqueue; run them with ``manage.py runworker``."""

    task_class = OperationTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias, params):
        super().__init__(alias, params)
        self.option_problems = _problems(self.options)
        merged = dict(OPTION_DEFAULTS)
        if isinstance(self.options, dict):
            merged.update(self.options)
        self.settings = merged

    # -- configuration --------------------------------------------------------------------

    def queue_for(self, queue_name: str) -> str:
        return f"{self.settings['QUEUE_PREFIX']}{queue_name}"

    def check(self, **kwargs):
        errors = [
            checks.Error(
                f"TASKS[{self.alias!r}]: {problem}.",
                hint="Fix the task backend's OPTIONS; see operations/task_backend.py and the README.",
                id="operations.E101",
            )
            for problem in self.option_problems
        ]
        for name in sorted(self.queues):
            queue = self.queue_for(name) if not self.option_problems else name
            if not isinstance(name, str) or not QUEUE_NAME.match(queue):
                errors.append(
                    checks.Error(
                        f"TASKS[{self.alias!r}]: queue name {name!r} cannot be a workqueue queue ({queue!r}).",
                        hint="Use letters, digits, '.', '_', ':' or '-' in QUEUES.",
                        id="operations.E102",
                    )
                )
        return errors

    def validate_task(self, task):
        super().validate_task(task)
        if self.option_problems:
            raise InvalidTask(f"TASKS[{self.alias!r}] is misconfigured: {'; '.join(self.option_problems)}")
        attempts = getattr(task, "max_attempts", None)
        if attempts is not None and (isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1):
            raise InvalidTask(f"max_attempts must be an integer >= 1, not {attempts!r}")
        for key in ("retry_delay", "retry_backoff"):
            value = getattr(task, key, None)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value < 0):
                raise InvalidTask(f"{key} must be a non-negative number of seconds, not {value!r}")

    # -- enqueue and results --------------------------------------------------------------

    def _retry_policy(self, task) -> dict:
        s = self.settings
        return {
            "max_attempts": getattr(task, "max_attempts", None) or s["MAX_ATTEMPTS"],
            "retry_delay": float(s["RETRY_DELAY"] if getattr(task, "retry_delay", None) is None else task.retry_delay),
            "retry_backoff": float(
                s["RETRY_BACKOFF"] if getattr(task, "retry_backoff", None) is None else task.retry_backoff
            ),
            "max_retry_delay": float(s["MAX_RETRY_DELAY"]),
        }

    def enqueue(self, task, args, kwargs):
        """Store the task as an operation plus its work item (joining the caller's transaction)."""
        import operations

        self.validate_task(task)
        try:
            args_json = normalize_json(list(args))
            kwargs_json = normalize_json(dict(kwargs))
            json.dumps([args_json, kwargs_json], allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidTask(
                f"the arguments of {task.module_path} must be JSON-serialisable ({exc}); "
                "pass ids and plain values, not model instances or objects"
            )
        policy = self._retry_policy(task)
        request = {
            "task": task.module_path,
            "args": args_json,
            "kwargs": kwargs_json,
            "takes_context": task.takes_context,
            "backend": self.alias,
            "queue_name": task.queue_name,
            "priority": task.priority,
            **policy,
        }
        try:
            op = operations.start(
                kind_for(task.module_path),
                request,
                owner=self.settings["OWNER"] or None,
                priority=task.priority,
                run_after=task.run_after,
                queue=self.queue_for(task.queue_name),
                max_attempts=policy["max_attempts"],
            )
        except operations.InvalidRequest as exc:
            raise InvalidTask(str(exc))
        result = self._result(op, task=task)
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id):
        from operations.models import Operation

        op = Operation.objects.filter(pk=result_id, kind__startswith=KIND_PREFIX).first()
        if op is None or not is_task_kind(op.kind):
            raise TaskResultDoesNotExist(result_id)
        return self._result(op)

    def cancel(self, result_id: str) -> TaskResult:
        """Ask a task to stop: a pending one is cancelled now, a running one when it looks."""
        import operations

        operations.cancel(result_id)
        return self.get_result(result_id)

    def _result(self, op, *, task=None) -> TaskResult:
        request = op.request or {}
        if task is None:
            task = load_task(request.get("task", ""), self.alias, request)
        log_entries = op.attempt_log or []
        errors = [
            TaskError(exception_class_path=e["exception"], traceback=e.get("traceback", ""))
            for e in log_entries
            if e.get("exception")
        ]
        result = TaskResult(
            task=task,
            id=op.id,
            status=STATUS[op.state],
            enqueued_at=op.created_at,
            started_at=op.started_at,
            finished_at=op.finished_at,
            last_attempted_at=_parse(log_entries[-1].get("started_at")) if log_entries else None,
            args=request.get("args", []),
            kwargs=request.get("kwargs", {}),
            backend=self.alias,
            errors=errors,
            worker_ids=[e.get("worker_id", "") for e in log_entries],
        )
        if op.state == "succeeded" and isinstance(op.result_detail, dict):
            object.__setattr__(result, "_return_value", op.result_detail.get("return_value"))
        return result


def cancel(result) -> TaskResult:
    """Ask the task behind ``result`` (a TaskResult or its id) to stop."""
    from operations._tasks_compat import task_backends

    result_id = getattr(result, "id", result)
    backend = task_backends[getattr(result, "backend", "default")]
    return backend.cancel(result_id)


def _parse(value) -> dt.datetime | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value)
    except ValueError:
        return None


def kind_for(module_path: str) -> str:
    """The operation kind a task runs under: ``task.<module path>`` when it is a valid kind name."""
    kind = f"{KIND_PREFIX}.{module_path}"
    return kind if len(kind) <= MAX_KIND_LENGTH and KIND.match(kind) else KIND_PREFIX


def is_task_kind(kind: str) -> bool:
    return kind == KIND_PREFIX or kind.startswith(KIND_PREFIX + ".")


def _missing_task(*args, **kwargs):
    raise RuntimeError("this task's function could not be imported")


def load_task(path: str, alias: str, request: dict):
    """The Task object a stored request names (a placeholder when it can no longer be imported)."""
    try:
        found = import_string(path)
        if isinstance(found, Task):
            return found
    except (ImportError, AttributeError, ValueError):
        pass
    return OperationTask(
        func=_missing_task,
        backend=alias,
        queue_name=request.get("queue_name", "default"),
        priority=request.get("priority", 0),
        takes_context=False,
    )


def _delay(request, attempt_number: int) -> float:
    delay = float(request.get("retry_delay", 10.0)) * float(request.get("retry_backoff", 2.0)) ** max(
        attempt_number - 1, 0
    )
    return min(delay, float(request.get("max_retry_delay", 3600.0)))


def run_task(request: dict, reporter):
    """Run one stored task: the operation kind's run function."""
    import operations

    task = import_string(request["task"])
    if not isinstance(task, Task):
        raise operations.Unretryable(
            operations.Fail("not_a_task", "%s is not a task (decorate it with @task)", request["task"])
        )
    backend = task.get_backend()
    op = reporter.operation
    result = backend._result(op, task=task) if op is not None else None
    if result is not None:
        object.__setattr__(result, "status", TaskResultStatus.RUNNING)
        task_started.send(type(backend), task_result=result)
    args, kwargs = request.get("args", []), request.get("kwargs", {})
    try:
        if task.takes_context:
            value = task.call(OperationTaskContext(task_result=result, reporter=reporter), *args, **kwargs)
        else:
            value = task.call(*args, **kwargs)
    except Exception:
        if result is not None and reporter.attempt.final:
            object.__setattr__(result, "status", TaskResultStatus.FAILED)
            task_finished.send(type(backend), task_result=result)
        raise
    value = normalize_json(value)
    if len(json.dumps(value).encode()) > MAX_RETURN_BYTES:
        raise operations.Unretryable(
            operations.Fail(
                "result_too_large",
                "the return value of %s is over %d bytes; store it elsewhere and return a reference",
                request["task"],
                MAX_RETURN_BYTES,
            )
        )
    if result is not None:
        object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
        object.__setattr__(result, "_return_value", value)
        task_finished.send(type(backend), task_result=result)
    return {"return_value": value}


def resolve(kind: str) -> Definition | None:
    """Definitions for task kinds, made on demand (one kind per task function)."""
    if not is_task_kind(kind):
        return None
    return Definition(kind=kind, run=run_task, retry_delay=_delay)
