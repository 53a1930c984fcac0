"""A ``django.tasks`` backend: Django's task API, stored as operations and run by ``runworker``.

    TASKS = {
        "default": {
            "BACKEND": "operations.tasks.backend.OperationsBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"MAX_ATTEMPTS": 3, "RETRY_DELAY": 10, "RETRY_BACKOFF": 2},
        }
    }

Each enqueued task is an operation (kind ``task.<module path>``) and its work item, written in
one transaction with the caller's writes. It therefore gets the operation's durability,
progress, cancellation, watcher, admin and HTTP surface, and the queue's crash recovery: a
task whose worker dies is retried by another worker, never left RUNNING. Works with Django 6
(``django.tasks``) and with Django 5.2 plus the ``django-tasks`` backport.

The stored request keeps what ``.using()`` set (priority, queue, ``run_after``, backend alias),
so ``get_result`` rebuilds the task as it was enqueued and the run happens on that backend.
``task_finished`` is sent once the end is saved, with the saved result. Where we differ from
Django's development backends (JSON arguments, retries) is in the README. ``QUEUES: []`` means
what it means to Django, any queue name: ``runworker`` serves every queue named the backend's
``QUEUE_PREFIX`` + anything (a queue family, ``workqueue.worker.families``).

Beyond Django's API:

- retries with a ceiling and backoff, per backend (``OPTIONS``) or per task
  (``@task(max_attempts=5, retry_delay=30)``);
- ``cancel(result)`` asks a task to stop (pending: at once; running: when it looks);
- a task with ``takes_context=True`` gets ``context.reporter`` (progress, ``is_cancelled()``);
- an ``async def`` task is awaited on ``runworker``'s event loop, many at once (its reporter
  an ``AsyncReporter``), instead of one per thread through ``async_to_sync``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import inspect
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from operations.conf import DEFAULT_TASK_QUEUE_PREFIX, TASK_BACKEND
from operations.registry import KIND, MAX_KIND_LENGTH, Definition
from operations.tasks.compat import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from workqueue.conf import QUEUE_NAME, QueueSettings, count, factor, known_keys, seconds

if TYPE_CHECKING:
    from operations.reporter import Reporter

log = logging.getLogger("operations.tasks")

KIND_PREFIX = "task"

OPTION_DEFAULTS = {
    "MAX_ATTEMPTS": 3,  # attempts per task (a worker that dies counts as one); never unlimited
    "RETRY_DELAY": 10.0,  # seconds before the first retry
    "RETRY_BACKOFF": 2.0,  # each further retry waits this many times longer
    "MAX_RETRY_DELAY": 3600.0,  # upper bound on one retry's delay
    "QUEUE_PREFIX": DEFAULT_TASK_QUEUE_PREFIX,  # Django queue "emails" runs on workqueue queue "tasks.emails"
    "OWNER": "",  # owner recorded on the operations (scopes the HTTP surface)
    # the keyword argument whose value is the work item's group, for per-group flow control
    # (e.g. "tenant_id": send_report.enqueue(tenant_id=42) runs in group "42"); "" = none
    "GROUP_KWARG": "",
}

RETRY_KEYS = ("retry_delay", "retry_backoff", "max_retry_delay")  # stored on each task's request

STATUS = {
    "pending": TaskResultStatus.READY,
    "running": TaskResultStatus.RUNNING,
    "succeeded": TaskResultStatus.SUCCESSFUL,
    "failed": TaskResultStatus.FAILED,
    "cancelled": TaskResultStatus.FAILED,
}


class InvalidTaskArguments(InvalidTask, TypeError):
    """The task's arguments cannot be stored as JSON (an ``InvalidTask`` and a ``TypeError``).

    Django's development backends raise ``TypeError`` here and ours used to raise
    ``InvalidTask``: code written against either catches this one.
    """


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationTask(Task):
    """Django's Task, plus optional per-task retry settings: ``@task(max_attempts=5, retry_delay=30)``."""

    max_attempts: int | None = None
    retry_delay: float | None = None
    retry_backoff: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationTaskContext(TaskContext):  # type: ignore[misc]  # the stubs' TaskContext is not frozen; Django's is
    """Django's TaskContext, plus ``reporter``: progress and cancellation for the running task."""

    reporter: Reporter | None = None

    def is_cancelled(self) -> bool:
        return bool(self.reporter is not None and self.reporter.is_cancelled())


# Each option's check (the workqueue settings' own validators) and what to add to its message.
OPTION_CHECKS: dict[str, tuple[Callable[..., Any], dict[str, Any], str]] = {
    "MAX_ATTEMPTS": (count, {}, " (attempts are never unlimited)"),
    "RETRY_DELAY": (seconds, {"allow_zero": True}, ""),
    "MAX_RETRY_DELAY": (seconds, {"allow_zero": True}, ""),
    "RETRY_BACKOFF": (factor, {}, ""),
}


def read_options(options: object) -> tuple[dict, list[str]]:
    """OPTIONS over their defaults (durations in seconds), and what is wrong with them."""
    merged = dict(OPTION_DEFAULTS)
    if not isinstance(options, dict):
        return merged, [f"OPTIONS must be a dict, not {type(options).__name__}"]
    problems = []
    try:
        known_keys(options, OPTION_DEFAULTS, what="OPTIONS", error=ValueError)
    except ValueError as exc:
        problems.append(str(exc).rstrip("."))
    for key, value in options.items():
        if key in OPTION_CHECKS:
            check, extra, note = OPTION_CHECKS[key]
            try:
                merged[key] = check(value, what=f"OPTIONS[{key!r}]", error=ValueError, **extra)
            except ValueError as exc:
                problems.append(str(exc).rstrip(".") + note)
        elif key in OPTION_DEFAULTS:
            if isinstance(value, str):
                merged[key] = value
            else:
                problems.append(f"OPTIONS[{key!r}] must be a string, not {value!r}")
    return merged, problems


class OperationsBackend(BaseTaskBackend):
    """Store tasks as operations on the workqueue; run them with ``manage.py runworker``."""

    task_class = OperationTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias, params):
        super().__init__(alias, params)
        self.settings, self.option_problems = read_options(self.options)

    # -- configuration --------------------------------------------------------------------

    def queue_for(self, queue_name: str) -> str:
        return f"{self.settings['QUEUE_PREFIX']}{queue_name}"

    def check(self, **kwargs):
        errors = [
            checks.Error(
                f"TASKS[{self.alias!r}]: {problem}.",
                hint="Fix the task backend's OPTIONS; see operations/tasks/backend.py and the README.",
                id="operations.E101",
            )
            for problem in self.option_problems
        ]
        if not self.queues and not self.option_problems and not self.settings["QUEUE_PREFIX"]:
            errors.append(
                checks.Error(
                    f"TASKS[{self.alias!r}]['QUEUES'] is empty (any queue name) and OPTIONS['QUEUE_PREFIX'] "
                    "is '': runworker serves such a backend's tasks as every queue named its prefix + "
                    "anything, and with no prefix that would be every queue of the site.",
                    hint='Keep a QUEUE_PREFIX (the default is "tasks.") or list the queue names in QUEUES.',
                    id="operations.E103",
                )
            )
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
        self._retry_policy(task)
        _registered.setdefault(task.module_path, task)  # the @task itself (a .using() copy comes later)

    # -- enqueue and results --------------------------------------------------------------

    def _retry_policy(self, task) -> dict:
        """The task's own retry settings over the backend's (InvalidTask names a bad one)."""
        policy = {"max_retry_delay": self.settings["MAX_RETRY_DELAY"]}
        for key in ("max_attempts", "retry_delay", "retry_backoff"):
            check, extra, note = OPTION_CHECKS[key.upper()]
            try:
                value = check(getattr(task, key, None), what=key, allow_none=True, error=InvalidTask, **extra)
            except InvalidTask as exc:
                raise InvalidTask(f"{task.module_path}: {str(exc).rstrip('.')}{note}") from None
            policy[key] = self.settings[key.upper()] if value is None else value
        return policy

    def enqueue(self, task, args, kwargs):
        """Store the task as an operation plus its work item (joining the caller's transaction)."""
        return self.enqueue_as(task, args, kwargs, id=None)

    def enqueue_as(self, task, args, kwargs, *, id: str | None):
        """``enqueue`` under a chosen operation id: a repeat returns the same run (schedules use it)."""
        import operations

        self.validate_task(task)
        try:
            args_json = normalize_json(list(args))
            kwargs_json = normalize_json(dict(kwargs))
            json.dumps([args_json, kwargs_json], allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidTaskArguments(
                f"the arguments of {task.module_path} must be JSON-serialisable ({exc}); "
                "pass ids and plain values, not model instances or objects"
            ) from None
        policy = self._retry_policy(task)
        priority = int(task.priority)  # Django accepts whole floats (3.0); the queue stores integers
        request = {
            "task": task.module_path,
            "args": args_json,
            "kwargs": kwargs_json,
            "takes_context": task.takes_context,
            "backend": self.alias,
            "queue_name": task.queue_name,
            "priority": priority,
            "run_after": task.run_after.isoformat() if task.run_after is not None else None,
            **policy,
        }
        if task.backend != self.alias:  # enqueued through another backend than the task names
            request["task_backend"] = task.backend
        group_kwarg = self.settings["GROUP_KWARG"]
        group = kwargs.get(group_kwarg) if group_kwarg else None
        try:
            op = operations.start(
                kind_for(task.module_path),
                request,
                owner=self.settings["OWNER"] or None,
                priority=priority,
                run_after=task.run_after,
                queue=self.queue_for(task.queue_name),
                max_attempts=policy["max_attempts"],
                id=id,
                group=None if group is None else str(group),
            )
        except operations.InvalidRequest as exc:
            raise InvalidTask(str(exc)) from None
        result = self._result(op, task=task)
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id):
        """The task's result as stored now; only results this backend enqueued."""
        from operations.models import Operation

        op = Operation.objects.filter(pk=result_id, kind__startswith=KIND_PREFIX).first()
        if op is None or not is_task_kind(op.kind) or (op.request or {}).get("backend", self.alias) != self.alias:
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
            task = load_task(request, self.alias)
        log_entries = _attempt_log(op)
        errors = [
            TaskError(exception_class_path=e["exception"], traceback=e.get("traceback", ""))
            for e in log_entries
            if e.get("exception")
        ]
        result: TaskResult[Any, Any] = TaskResult(
            task=task,
            id=op.id,
            status=STATUS[op.state],
            enqueued_at=op.created_at,
            started_at=op.started_at,
            finished_at=op.finished_at,
            last_attempted_at=_parse(log_entries[-1].get("started_at")) if log_entries else None,
            args=request.get("args", []),
            kwargs=request.get("kwargs", {}),
            backend=request.get("backend", self.alias),
            errors=errors,
            worker_ids=[e.get("worker_id", "") for e in log_entries],
        )
        if op.state == "succeeded" and isinstance(op.result_detail, dict):
            object.__setattr__(result, "_return_value", op.result_detail.get("return_value"))
        return result


def _attempt_log(op) -> list:
    """The operation's attempt log. A row read without it (as begin hands the runner its run)
    that is in its first attempt needs no read: that begin wrote exactly this one entry (its
    started_at is the operation's, both the begin's now()); later attempts are read."""
    if "attempt_log" not in op.__dict__ and op.state == "running" and op.attempts == 1 and op.started_at:
        return [{"number": 1, "worker_id": op.worker_id, "started_at": op.started_at.isoformat()}]
    return op.attempt_log or []


def cancel(result) -> TaskResult:
    """Ask the task behind ``result`` (a TaskResult or its id) to stop."""
    from operations.tasks.compat import task_backends

    result_id = getattr(result, "id", result)
    backend = _ours(task_backends[getattr(result, "backend", "default")])
    return backend.cancel(result_id)


def _ours(backend: BaseTaskBackend) -> OperationsBackend:
    """The backend a stored task names: one of ours, since it stored the task as an operation."""
    if not isinstance(backend, OperationsBackend):
        raise TypeError(f"TASKS[{backend.alias!r}] is not an {TASK_BACKEND}; tasks stored as operations need one")
    return backend


def _parse(value) -> dt.datetime | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value)
    except ValueError:
        return None


#: Every task defined on this backend in this process, by module path, as its ``@task`` made it
#: (Django validates each task with its backend when the decorator runs).
_registered: dict[str, Task] = {}
_discovered = threading.Lock()
_discovery_done = False


def registered_task(module_path: str) -> Task | None:
    """The ``@task`` at ``module_path`` if one is defined on this backend; imports nothing but
    the installed apps' ``tasks`` modules (once, as the admin autodiscovers ``admin``).

    What schedules run (``task=`` in settings, the admin or the command) is looked up here, so a
    dotted path typed by an editor can name only a registered task, never import a module."""
    global _discovery_done
    if module_path not in _registered and not _discovery_done:
        with _discovered:
            if not _discovery_done:
                from django.utils.module_loading import autodiscover_modules

                autodiscover_modules("tasks")
                _discovery_done = True
    return _registered.get(module_path)


def kind_for(module_path: str) -> str:
    """The operation kind a task runs under: ``task.<module path>`` when it is a valid kind name."""
    kind = f"{KIND_PREFIX}.{module_path}"
    return kind if len(kind) <= MAX_KIND_LENGTH and KIND.match(kind) else KIND_PREFIX


def is_task_kind(kind: str) -> bool:
    return kind == KIND_PREFIX or kind.startswith(KIND_PREFIX + ".")


_UNSET_TASK = object()


def _missing_task(*args, **kwargs):
    raise RuntimeError("this task's function could not be imported")


def load_task(request: dict, alias: str = "default", *, found=_UNSET_TASK):
    """The task as it was enqueued: the stored function with the options ``.using()`` gave it.

    A function that can no longer be imported reads back as a placeholder; options the backend
    would now refuse (a queue since removed from QUEUES) are kept as stored, unvalidated.
    """
    options = {
        "backend": request.get("task_backend") or request.get("backend") or alias,
        "queue_name": request.get("queue_name") or "default",
        "priority": request.get("priority", 0),
        "run_after": _parse(request.get("run_after")),
    }
    if found is _UNSET_TASK:  # (a caller that imported it already passes it)
        try:
            found = import_string(request.get("task", ""))
        except (ImportError, AttributeError, ValueError):
            found = None
    if not isinstance(found, Task):
        return _unvalidated(OperationTask, func=_missing_task, takes_context=False, **options)
    try:
        return found.using(**options)
    except (InvalidTask, ImproperlyConfigured):  # InvalidTaskBackend is an ImproperlyConfigured
        return _unvalidated(type(found), **{**_fields(found), **options})


def _fields(task) -> dict:
    return {f.name: getattr(task, f.name) for f in dataclasses.fields(task)}


def _unvalidated(cls, **values):
    """A task built from stored values without asking the backend (it may refuse them now)."""
    defaults = {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    task = object.__new__(cls)
    for name, value in {**defaults, **values}.items():
        object.__setattr__(task, name, value)
    return task


def _delay(request, attempt_number: int) -> float:
    """The backoff the task was enqueued with, by the queue settings' own rule."""
    retry_delay, retry_backoff, max_retry_delay = (
        float(request.get(key, OPTION_DEFAULTS[key.upper()])) for key in RETRY_KEYS
    )
    policy = QueueSettings(retry_delay=retry_delay, retry_backoff=retry_backoff, max_retry_delay=max_retry_delay)
    return policy.retry_delay_for(attempt_number)


def _prepare(request: dict, reporter):
    """The task to run, its arguments, and its result marked RUNNING (``task_started`` sent)."""
    import operations

    found = import_string(request["task"])  # an ImportError is retried: another worker may have the code
    if not isinstance(found, Task):
        raise operations.Unretryable(
            operations.Fail("not_a_task", "%s is not a task (decorate it with @task)", request["task"])
        )
    task = load_task(request, found=found)  # with the options it was enqueued with, on the backend that enqueued it
    backend = _ours(task_backends[request.get("backend") or task.backend])
    op = reporter.operation
    if op is None:
        raise RuntimeError("run_task is the operations runner's kind function; the runner sets reporter.operation")
    result = backend._result(op, task=task)
    object.__setattr__(result, "status", TaskResultStatus.RUNNING)
    task_started.send(type(backend), task_result=result)
    args, kwargs = request.get("args", []), request.get("kwargs", {})
    if task.takes_context:
        args = [OperationTaskContext(task_result=result, reporter=reporter), *args]
    return task, args, kwargs


def _returned(value) -> dict:
    import operations

    try:
        value = normalize_json(value)
    except (TypeError, ValueError) as exc:
        # The task ran (and did whatever it does) but its value cannot be kept: running it
        # again would return the same kind of value, so it fails now, as Django's backends do.
        raise operations.Unretryable(exc) from None
    # The runner refuses a result over its 16 KiB limit (failed result_too_large, not retried).
    return {"return_value": value}


def run_task(request: dict, reporter):
    """Run one stored task: the operation kind's run function."""
    task, args, kwargs = _prepare(request, reporter)
    return _returned(task.call(*args, **kwargs))


async def arun_task(request: dict, reporter):
    """Run one stored ``async def`` task on runworker's event loop (the kind's run function)."""
    from workqueue.worker.pools.eventloop import off_loop

    task, args, kwargs = await off_loop(_prepare, request, reporter)
    return _returned(await task.func(*args, **kwargs))


def _is_async_task(kind: str) -> bool:
    """Whether the task a kind names is an ``async def`` (a kind that names no task: no)."""
    if kind == KIND_PREFIX:
        return False  # a module path too long for a kind name: run it through task.call()
    try:
        found = import_string(kind[len(KIND_PREFIX) + 1 :])
    except (ImportError, AttributeError, ValueError):
        return False
    return isinstance(found, Task) and inspect.iscoroutinefunction(found.func)


def task_ended(op, state: str, value, exc: BaseException | None) -> None:
    """Send ``task_finished`` once the task's end is saved, with the result as saved."""
    from operations.models import Operation
    from operations.runner import saved_operation

    request = op.request or {}
    backend = _ours(task_backends[request.get("backend") or "default"])
    # The row the terminal write returned (called from the runner), else read it again.
    saved = saved_operation() or Operation.objects.using(op._state.db or "default").filter(pk=op.id).first()
    if saved is None:  # deleted in the meantime: nothing to report
        return
    task_finished.send(type(backend), task_result=backend._result(saved))


def resolve(kind: str) -> Definition | None:
    """Definitions for task kinds, made on demand (one kind per task function)."""
    if not is_task_kind(kind):
        return None
    run = arun_task if _is_async_task(kind) else run_task
    return Definition(kind=kind, run=run, retry_delay=_delay, finished=task_ended)
