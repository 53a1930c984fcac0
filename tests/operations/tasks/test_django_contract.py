"""Django's own task tests, adapted to run against OperationsBackend.

Where they come from: django/django ``tests/operations/tasks/`` — ``test_tasks.py`` (the Task API, run
there on the DummyBackend and ImmediateBackend), ``test_immediate_backend.py`` and
``test_dummy_backend.py``. Each test below names the Django test it adapts; the assertions
are Django's, written again in pytest against our backend and ``tests/testapp/tasks.py``.

What was adapted:

- Django's backends run a task inside ``enqueue`` (Immediate) or never (Dummy). Here a task
  is enqueued as READY and then run by a real ``manage.py runworker`` (``start_worker``), or,
  where a test watches signals or log records (which fire in the process that runs the
  task), by ``run_inline``: a worker's turn done by hand in this thread with the real
  operations handler.
- Tests of what those backends cannot do (``get_result`` raising NotImplementedError,
  refusing ``run_after``) are left out: ours supports both and other tests here cover them.
- ``KeyboardInterrupt``: the ImmediateBackend lets it through and records nothing. Ours
  records the attempt as failed first, then lets it through in the main thread (it may be
  the user's Ctrl-C); in a worker's runner thread it is only recorded (see test_backend.py).
- ``QUEUES: []`` ("any queue name") is Django's: a task on any queue name is enqueued, and
  ``runworker`` serves it as a queue family (test_any_queue.py runs one under a real worker).
- The TaskResult ordering/equality/hash tests of Django's main branch (``__lt__``, equality
  ignoring ``backend``) are not in Django 6.1 or the 5.2 backport, so they are not here; on
  these versions TaskResult equality compares every field, which ``get_result(r.id) == r``
  below satisfies. Pickling a task needs ``Task.__reduce__``, which Django 6.1 has and the
  5.2 backport has not: those two are skipped there.
- Ours retries failed attempts; the failing tasks here allow one attempt
  (``@task(max_attempts=1)``) so a result carries exactly one error, as Django's do.

Runs on Django 6.x (``make test``) and Django 5.2 with the django-tasks backport
(``make test-django52``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import pickle
import re
import threading
from functools import partial

import pytest
from asgiref.sync import async_to_sync
from django.db import connections, transaction
from django.test import override_settings
from django.utils import timezone
from django.utils.module_loading import import_string

from operations.models import Operation
from operations.tasks.backend import OperationsBackend, OperationTask
from operations.tasks.compat import (
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from tests.operations.tasks.conftest import run_inline, wait_finished
from tests.testapp import tasks
from workqueue.models import WorkItem

try:  # Django >= 6.0
    from django.tasks import DEFAULT_TASK_QUEUE_NAME, default_task_backend, task
    from django.tasks.base import TASK_MAX_PRIORITY, TASK_MIN_PRIORITY, Task
    from django.tasks.exceptions import InvalidTaskBackend, TaskResultMismatch

    LOGGER = "django.tasks"
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import DEFAULT_TASK_QUEUE_NAME, default_task_backend, task
    from django_tasks.base import TASK_MAX_PRIORITY, TASK_MIN_PRIORITY, Task
    from django_tasks.exceptions import InvalidTaskBackendError as InvalidTaskBackend
    from django_tasks.exceptions import TaskResultMismatch

    LOGGER = "django_tasks"

PRIORITY_MESSAGE = f"priority must be a whole number between {TASK_MIN_PRIORITY} and {TASK_MAX_PRIORITY}."
WORKER = ("--queue", "tasks.default", "--queue", "tasks.queue_1", "--poll", "0.5")

db = pytest.mark.django_db(transaction=True)


def assert_ran_in_order(result) -> None:
    assert result.started_at is not None and result.last_attempted_at is not None
    assert result.finished_at is not None
    assert result.started_at >= result.enqueued_at
    assert result.finished_at >= result.started_at


def log_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


# -- test_tasks.py: the Task API on our backend ---------------------------------------------


def test_using_correct_backend():
    assert default_task_backend == task_backends["default"]
    assert isinstance(task_backends["default"], OperationsBackend)
    assert default_task_backend.alias == "default"
    assert default_task_backend.options == {"MAX_ATTEMPTS": 3, "RETRY_DELAY": 0.2, "RETRY_BACKOFF": 1}


def test_task_decorator():
    for decorated in (tasks.noop, tasks.noop_async, tasks.meaning_of_life, tasks.send_email):
        assert isinstance(decorated, Task) and isinstance(decorated, OperationTask)


@db
def test_enqueue_task():
    result = tasks.noop.enqueue()
    assert result.status == TaskResultStatus.READY
    assert result.task == tasks.noop
    assert (result.args, result.kwargs) == ([], {})
    assert default_task_backend.get_result(result.id) == result


@db
def test_enqueue_task_async():
    result = async_to_sync(tasks.noop.aenqueue)()
    assert result.status == TaskResultStatus.READY
    assert result.task == tasks.noop
    assert (result.args, result.kwargs) == ([], {})
    assert default_task_backend.get_result(result.id) == result


@db
def test_enqueue_with_invalid_argument():
    with pytest.raises(TypeError, match="Unsupported type"):
        tasks.noop.enqueue(dt.datetime.now())
    assert not Operation.objects.exists()


@db
def test_aenqueue_with_invalid_argument():
    with pytest.raises(TypeError, match="Unsupported type"):
        async_to_sync(tasks.noop.aenqueue)(dt.datetime.now())
    assert not Operation.objects.exists()


def test_using_priority():
    assert tasks.noop.priority == 0
    assert tasks.noop.using(priority=1).priority == 1
    assert tasks.noop.priority == 0


def test_using_queue_name():
    assert tasks.noop.queue_name == DEFAULT_TASK_QUEUE_NAME
    assert tasks.noop.using(queue_name="queue_1").queue_name == "queue_1"
    assert tasks.noop.queue_name == DEFAULT_TASK_QUEUE_NAME


def test_using_run_after():
    now = timezone.now()
    assert tasks.noop.run_after is None
    assert tasks.noop.using(run_after=now).run_after == now
    assert tasks.noop.run_after is None


def test_using_unknown_backend():
    assert tasks.noop.backend == "default"
    with pytest.raises(InvalidTaskBackend, match=re.escape("The connection 'unknown' doesn't exist.")):
        tasks.noop.using(backend="unknown")


def test_using_missing_backend():
    settings = {**_tasks_setting(), "missing": {"BACKEND": "does.not.exist"}}
    message = re.escape("Could not find backend 'does.not.exist': No module named 'does'")
    with override_settings(TASKS=settings), pytest.raises(InvalidTaskBackend, match=message):
        tasks.noop.using(backend="missing")


def test_using_creates_new_instance():
    new_task = tasks.noop.using()
    assert new_task == tasks.noop
    assert new_task is not tasks.noop


def test_chained_using():
    now = timezone.now()
    run_after_task = tasks.noop.using(run_after=now)
    assert run_after_task.run_after == now
    priority_task = run_after_task.using(priority=10)
    assert (priority_task.priority, priority_task.run_after) == (10, now)
    assert run_after_task.priority == 0


@db
def test_refresh_result():
    result = async_to_sync(tasks.noop.aenqueue)()
    original = dataclasses.asdict(result)
    result.refresh()
    assert dataclasses.asdict(result) == original
    async_to_sync(result.arefresh)()
    assert dataclasses.asdict(result) == original


def test_naive_datetime():
    with pytest.raises(InvalidTask, match=re.escape("run_after must be an aware datetime.")):
        tasks.noop.using(run_after=dt.datetime.now())


def test_invalid_priority():
    for bad in (-101, 101, 3.1):
        with pytest.raises(InvalidTask, match=PRIORITY_MESSAGE):
            tasks.noop.using(priority=bad)
    for good in (100, -100, 0):
        tasks.noop.using(priority=good)


def test_unknown_queue_name():
    with pytest.raises(InvalidTask, match=re.escape("Queue 'queue-2' is not valid for backend.")):
        tasks.noop.using(queue_name="queue-2")


@db
def test_unknown_queue_name_with_empty_queues():
    # Django: validation is bypassed when the backend's QUEUES is an empty list. Ours enqueues
    # it onto the workqueue queue QUEUE_PREFIX + the name, which runworker serves as a family.
    settings = {**_tasks_setting(), "any": {"BACKEND": "operations.tasks.backend.OperationsBackend", "QUEUES": []}}
    with override_settings(TASKS=settings):
        anywhere = tasks.noop.using(queue_name="queue-2", backend="any")
        assert anywhere.queue_name == "queue-2"
        result = anywhere.enqueue()
        assert result.status == TaskResultStatus.READY
        assert WorkItem.objects.get(key=result.id).queue == "tasks.queue-2"
        assert task_backends["any"].get_result(result.id) == result


def test_call_task():
    assert tasks.meaning_of_life.call() == 42


def test_call_task_async():
    assert async_to_sync(tasks.meaning_of_life.acall)() == 42


def test_call_async_task():
    assert async_to_sync(tasks.noop_async.acall)() is None


def test_call_async_task_sync():
    assert tasks.noop_async.call() is None


@db
def test_get_result():
    result = default_task_backend.enqueue(tasks.noop, (), {})
    assert tasks.noop.get_result(result.id) == result


@db
def test_get_result_async():
    result = async_to_sync(default_task_backend.aenqueue)(tasks.noop, (), {})
    assert async_to_sync(tasks.noop.aget_result)(result.id) == result


@db
def test_get_missing_result():
    with pytest.raises(TaskResultDoesNotExist):
        tasks.noop.get_result("123")
    with pytest.raises(TaskResultDoesNotExist):
        async_to_sync(tasks.noop.aget_result)("123")


@db
def test_get_incorrect_result():
    result = default_task_backend.enqueue(tasks.noop_async, (), {})
    with pytest.raises(TaskResultMismatch, match="Task does not match"):
        tasks.noop.get_result(result.id)


@db
def test_get_incorrect_result_async():
    result = async_to_sync(default_task_backend.aenqueue)(tasks.noop_async, (), {})
    with pytest.raises(TaskResultMismatch, match="Task does not match"):
        async_to_sync(tasks.noop.aget_result)(result.id)


def test_invalid_function():
    def inner():
        pass

    for invalid in (any, inner):
        with pytest.raises(InvalidTask, match=re.escape("Task function must be defined at a module level.")):
            task()(invalid)


def test_get_backend():
    assert tasks.noop.backend == "default"
    assert isinstance(tasks.noop.get_backend(), OperationsBackend)
    other = tasks.noop.using(backend="other")
    assert other.backend == "other"
    assert other.get_backend() is task_backends["other"] and isinstance(other.get_backend(), OperationsBackend)


def test_name():
    assert tasks.noop.name == "noop"
    assert tasks.noop_async.name == "noop_async"


def test_module_path():
    assert tasks.noop.module_path == "tests.testapp.tasks.noop"
    assert tasks.noop_async.module_path == "tests.testapp.tasks.noop_async"
    assert import_string(tasks.noop.module_path) is tasks.noop
    assert import_string(tasks.noop_async.module_path) is tasks.noop_async


needs_pickle = pytest.mark.skipif(
    not hasattr(Task, "_reconstruct"), reason="the backport's Task does not pickle (no Task.__reduce__)"
)


@needs_pickle
def test_pickle_task():
    assert pickle.loads(pickle.dumps(tasks.noop)) == tasks.noop
    using = tasks.noop.using(priority=5, backend="other")
    assert pickle.loads(pickle.dumps(using)) == using


@needs_pickle
@db
def test_pickle_task_result():
    result = tasks.noop.using(priority=5).enqueue()
    assert pickle.loads(pickle.dumps(result)) == result


def test_no_backends():
    with override_settings(TASKS={}), pytest.raises(InvalidTaskBackend):
        tasks.noop.enqueue()


@db
def test_task_error_invalid_exception():
    result = tasks.fail_value_error.enqueue()
    run_inline(result)
    assert len(result.errors) == 1
    object.__setattr__(result.errors[0], "exception_class_path", "subprocess.run")
    with pytest.raises(ValueError, match=re.escape("'subprocess.run' does not reference a valid exception.")):
        _ = result.errors[0].exception_class


@db
def test_task_error_unknown_module():
    result = tasks.fail_value_error.enqueue()
    run_inline(result)
    assert len(result.errors) == 1
    object.__setattr__(result.errors[0], "exception_class_path", "does.not.exist")
    with pytest.raises(ImportError):
        _ = result.errors[0].exception_class


def test_takes_context_without_taking_context():
    with pytest.raises(
        InvalidTask, match=re.escape("Task takes context but does not have a first argument of 'context'.")
    ):
        task(takes_context=True)(tasks.meaning_of_life.func)


def test_run_after_in_decorator():
    # Django 6 says why; the 5.2 backport fails on the duplicate keyword. Both refuse it.
    with pytest.raises(TypeError):
        task(run_after=timezone.now())(tasks.meaning_of_life.func)


# -- test_immediate_backend.py: tasks run by a worker, outcomes as Django records them --------


@db
def test_enqueue_task_runs_under_runworker(start_worker):
    results = {t: t.enqueue(1, two=3) for t in (tasks.noop, tasks.noop_async)}
    start_worker(*WORKER)
    wait_finished(*results.values())
    for decorated, result in results.items():
        assert result.status == TaskResultStatus.SUCCESSFUL
        assert result.is_finished is True
        assert_ran_in_order(result)
        assert result.return_value is None
        assert result.task == decorated
        assert (result.args, result.kwargs) == ([1], {"two": 3})
        assert result.attempts == 1


@db
def test_aenqueue_task_runs_under_runworker(start_worker):
    results = {t: async_to_sync(t.aenqueue)() for t in (tasks.noop, tasks.noop_async)}
    start_worker(*WORKER)
    wait_finished(*results.values())
    for decorated, result in results.items():
        assert result.status == TaskResultStatus.SUCCESSFUL and result.is_finished is True
        assert_ran_in_order(result)
        assert result.return_value is None
        assert result.task == decorated
        assert (result.args, result.kwargs, result.attempts) == ([], {}, 1)


@db
@pytest.mark.parametrize(
    ("failing", "exception", "message"),
    [
        (tasks.fail_value_error, ValueError, "This task failed due to ValueError"),
        (tasks.fail_system_exit, SystemExit, "This task failed due to SystemExit"),
    ],
)
def test_catches_exception(caplog, failing, exception, message):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    result = failing.enqueue()
    run_inline(result)

    errors_logged = [r for r in caplog.records if r.name == LOGGER and r.levelno >= logging.ERROR]
    assert len(errors_logged) == 1 and result.id in errors_logged[0].getMessage()
    assert result.status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value
    assert result.is_finished is True
    assert_ran_in_order(result)
    assert result.errors[0].exception_class is exception
    assert result.errors[0].traceback.endswith(f"{exception.__name__}: {message}\n"), result.errors[0].traceback
    assert result.task == failing
    assert (result.args, result.kwargs) == ([], {})


@db
def test_throws_keyboard_interrupt():
    result = tasks.interrupt.enqueue()
    # Run in the main thread, KeyboardInterrupt reaches the caller as Django's lets it; ours
    # has recorded the attempt first.
    with pytest.raises(KeyboardInterrupt):
        run_inline(result)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is KeyboardInterrupt


@db
def test_complex_exception():
    result = tasks.complex_exception.enqueue()
    run_inline(result)
    assert result.status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value
    assert_ran_in_order(result)
    assert result._return_value is None
    assert result.errors[0].exception_class is ValueError
    assert 'ValueError(ValueError("This task failed"))' in result.errors[0].traceback
    assert result.task == tasks.complex_exception
    assert (result.args, result.kwargs) == ([], {})


@db
def test_complex_return_value():
    result = tasks.complex_return_value.enqueue()
    run_inline(result)
    assert result.status == TaskResultStatus.FAILED
    assert_ran_in_order(result)
    assert result._return_value is None
    assert [e.exception_class for e in result.errors] == [TypeError]  # not retried: it would return the same
    assert "Unsupported type" in result.errors[0].traceback


@db
def test_result_under_runworker(start_worker):
    result = default_task_backend.enqueue(tasks.meaning_of_life, [], {})
    via_async = async_to_sync(default_task_backend.aenqueue)(tasks.meaning_of_life, [], {})
    start_worker(*WORKER)
    wait_finished(result, via_async)
    for r in (result, via_async):
        assert r.status == TaskResultStatus.SUCCESSFUL
        assert r.return_value == 42


def _run_logged(task, caplog):
    """Enqueue ``task``, run it inline with the backend's DEBUG log captured; the result and its log lines."""
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    result = task.enqueue()
    run_inline(result)
    return result, log_lines(caplog)


@db
def test_enqueue_logs(caplog):
    result, lines = _run_logged(tasks.noop, caplog)
    assert len(lines) == 3, lines
    assert "enqueued" in lines[0] and result.id in lines[0]
    assert "state=RUNNING" in lines[1] and result.id in lines[1]
    assert "state=SUCCESSFUL" in lines[2] and result.id in lines[2]


@db
def test_failed_logs(caplog):
    result, lines = _run_logged(tasks.fail_value_error, caplog)
    assert len(lines) == 3, lines
    assert "state=RUNNING" in lines[1] and result.id in lines[1]
    assert "state=FAILED" in lines[2] and result.id in lines[2]


@db
def test_successful_task_no_none_type_in_logs(caplog):
    result, lines = _run_logged(tasks.noop, caplog)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert all("NoneType" not in line for line in lines)


@db
def test_takes_context_and_context_under_runworker(start_worker):
    with_id = tasks.get_task_id.enqueue()
    checked = tasks.check_context.enqueue(1)
    start_worker(*WORKER)
    wait_finished(with_id, checked)
    assert with_id.return_value == with_id.id  # Django's test_takes_context
    assert checked.status == TaskResultStatus.SUCCESSFUL, checked.errors  # Django's test_context


def _only_queue(name: str) -> dict:
    return {**_tasks_setting(), "default": {**_tasks_setting()["default"], "QUEUES": [name]}}


@db
def test_validate_on_enqueue():
    on_queue_1 = tasks.noop.using(queue_name="queue_1")  # valid when made; the backend changes after
    refused = pytest.raises(InvalidTask, match="Queue 'queue_1' is not valid for backend")
    with override_settings(TASKS=_only_queue("queue-1")), refused:
        on_queue_1.enqueue()
    assert not Operation.objects.exists()


@db
def test_validate_on_aenqueue():
    on_queue_1 = tasks.noop.using(queue_name="queue_1")
    refused = pytest.raises(InvalidTask, match="Queue 'queue_1' is not valid for backend")
    with override_settings(TASKS=_only_queue("queue-1")), refused:
        async_to_sync(on_queue_1.aenqueue)()
    assert not Operation.objects.exists()


# -- test_dummy_backend.py: what an enqueued, not yet run, result says --------------------------


@db
def test_dummy_enqueue_task():
    for decorated in (tasks.noop, tasks.noop_async):
        result = decorated.enqueue(1, two=3)
        assert result.status == TaskResultStatus.READY
        assert result.started_at is None and result.finished_at is None
        with pytest.raises(ValueError, match="Task has not finished yet"):
            _ = result.return_value
        assert result.task == decorated
        assert (result.args, result.kwargs) == ([1], {"two": 3})
        assert default_task_backend.get_result(result.id) == result


@db
def test_dummy_get_result_through_the_backend():
    result = default_task_backend.enqueue(tasks.noop, (), {})
    assert default_task_backend.get_result(result.id) == result
    assert async_to_sync(default_task_backend.aget_result)(result.id) == result


@db
def test_dummy_refresh_result_after_a_run(start_worker):
    result = default_task_backend.enqueue(tasks.meaning_of_life, (), {})
    via_async = async_to_sync(default_task_backend.aenqueue)(tasks.meaning_of_life, (), {})
    start_worker(*WORKER)
    assert result.status == TaskResultStatus.READY
    wait_finished(result)  # refresh()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 42)
    wait_finished(via_async)
    async_to_sync(via_async.arefresh)()
    assert (via_async.status, via_async.return_value) == (TaskResultStatus.SUCCESSFUL, 42)


@db
def test_dummy_get_missing_result():
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result("123")
    with pytest.raises(TaskResultDoesNotExist):
        async_to_sync(default_task_backend.aget_result)("123")


@db
def test_dummy_enqueue_logs(caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    result = tasks.noop.enqueue()
    lines = log_lines(caplog)
    assert len(lines) == 1 and "enqueued" in lines[0] and result.id in lines[0]


# -- transactions (test_immediate_backend / test_dummy_backend transaction cases) ------------


def _visible_elsewhere(op_id: str) -> bool:
    """Whether another connection (a worker's) can see the operation yet."""
    seen = []

    def look():
        try:
            seen.append(Operation.objects.filter(pk=op_id).exists())
        finally:
            connections.close_all()

    thread = threading.Thread(target=look)
    thread.start()
    thread.join(30)
    return seen == [True]


@db
def test_enqueue_joins_the_callers_transaction():
    with transaction.atomic():
        result = tasks.noop.enqueue()
        assert result.enqueued_at is not None and result.status == TaskResultStatus.READY
        assert not _visible_elsewhere(result.id)  # no worker can take it before the commit
    assert _visible_elsewhere(result.id)
    assert WorkItem.objects.filter(key=result.id, queue="tasks.default").exists()


@db
def test_enqueue_in_a_rolled_back_transaction_leaves_nothing():
    with pytest.raises(RuntimeError), transaction.atomic():
        tasks.noop.enqueue()
        raise RuntimeError("roll back")
    assert not Operation.objects.exists() and not WorkItem.objects.exists()


@db
def test_enqueue_on_commit_waits_for_the_commit():
    enqueued = []
    task_enqueued.connect(receiver := lambda sender, task_result, **kw: enqueued.append(task_result))
    try:
        with transaction.atomic():
            transaction.on_commit(partial(tasks.noop.enqueue))
            assert enqueued == [] and not Operation.objects.exists()
        assert len(enqueued) == 1 and Operation.objects.filter(pk=enqueued[0].id).exists()
        with pytest.raises(RuntimeError), transaction.atomic():
            transaction.on_commit(partial(tasks.noop.enqueue))
            raise RuntimeError("roll back")
        assert len(enqueued) == 1 and Operation.objects.count() == 1
    finally:
        task_enqueued.disconnect(receiver)


# -- signals: sent with their payloads, as Django's backends send them ----------------------


@pytest.fixture
def signals():
    seen = []
    receivers = {}
    for name, signal in (("enqueued", task_enqueued), ("started", task_started), ("finished", task_finished)):

        def receiver(sender, task_result, _name=name, **kwargs):
            seen.append((_name, sender, task_result, dataclasses.replace(task_result)))

        receivers[signal] = receiver
        signal.connect(receiver)
    yield seen
    for signal, receiver in receivers.items():
        signal.disconnect(receiver)


@db
def test_signals_carry_the_result_at_each_step(signals):
    result = tasks.meaning_of_life.enqueue()
    failed = tasks.fail_value_error.enqueue()
    run_inline(result, failed)

    for r, final in ((result, TaskResultStatus.SUCCESSFUL), (failed, TaskResultStatus.FAILED)):
        mine = [(name, sender, payload, copy) for name, sender, payload, copy in signals if payload.id == r.id]
        assert [name for name, *_ in mine] == ["enqueued", "started", "finished"]
        assert all(sender is OperationsBackend for _, sender, _, _ in mine)
        # enq is a copy made when sent (the returned result is refreshed later); the others are
        # the payloads themselves, which nothing changes after they are sent.
        (_, _, enq_payload, enq), (_, _, started, _), (_, _, ended, _) = mine
        assert enq_payload is r  # enqueue sends the result it returns
        assert enq.status == TaskResultStatus.READY and enq.started_at is None
        assert started.status == TaskResultStatus.RUNNING
        assert started.started_at is not None and started.worker_ids == ["inline"] and started.finished_at is None
        assert ended.status == final and ended.finished_at is not None and ended.worker_ids == ["inline"]
        assert ended.task == r.task and (ended.args, ended.kwargs) == (r.args, r.kwargs)
        assert ended == r  # the payload is the result as saved
    assert [e.exception_class_path for e in failed.errors] == ["builtins.ValueError"]
    assert result.return_value == 42 and result.errors == []


def _tasks_setting() -> dict:
    from django.conf import settings

    return settings.TASKS
