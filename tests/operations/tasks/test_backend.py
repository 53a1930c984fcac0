"""The django.tasks backend: Django's task API, stored as operations and run by real runworker processes.

Runs on Django 6 (django.tasks) and on Django 5.2 with the django-tasks backport
(`make test-django52`).
"""

import datetime as dt
import signal
import time

import pytest
from django.core import checks
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from operations.models import Operation
from operations.tasks.backend import OperationsBackend, cancel
from operations.tasks.compat import InvalidTask, TaskResultDoesNotExist, TaskResultStatus, task_backends
from tests.conftest import wait_until
from tests.testapp import tasks
from workqueue.models import WorkItem

QUEUES = ["--queue", "tasks.default", "--queue", "tasks.emails"]


def finished(result):
    result.refresh()
    return result.is_finished


@pytest.mark.django_db(transaction=True)
def test_documented_tasks_run_under_runworker_and_report_every_field(start_worker):
    before = timezone.now()
    plain = tasks.add.enqueue(2, 3)
    email = tasks.send_email.enqueue("ada@example.com", subject="welcome")
    ctx = tasks.with_context.enqueue(rows=10)
    later_at = timezone.now() + dt.timedelta(seconds=1.5)
    deferred = tasks.add.using(run_after=later_at, priority=-5).enqueue(1, 1)
    coro = tasks.async_add.enqueue(20, 22)
    results = [plain, email, ctx, deferred, coro]
    assert all(r.status == TaskResultStatus.READY for r in results)
    assert plain.enqueued_at >= before - dt.timedelta(seconds=1) and plain.started_at is None

    worker = start_worker(*QUEUES, "--poll", "1")
    for result in results:
        wait_until(lambda r=result: finished(r), timeout=30, message=f"{result.id} to finish")

    assert [r.status for r in results] == [TaskResultStatus.SUCCESSFUL] * 5, worker.output()[-3000:]
    assert plain.return_value == 5
    assert email.return_value == {"to": "ada@example.com", "subject": "welcome"}
    assert ctx.return_value == {"attempt": 1, "result_id": ctx.id}
    assert deferred.return_value == 2
    assert coro.return_value == 42
    for r in results:
        assert r.enqueued_at <= r.started_at <= r.finished_at
        assert r.last_attempted_at is not None and r.last_attempted_at >= r.started_at
        assert len(r.worker_ids) == 1 and r.worker_ids[0]
        assert r.attempts == 1 and r.errors == []
    # run_after held the deferred task back; priority, queue names and progress are ours underneath.
    assert deferred.started_at >= later_at - dt.timedelta(milliseconds=50)
    email_op = Operation.objects.get(pk=email.id)
    assert (email_op.queue, email_op.priority) == ("tasks.emails", 10)
    assert Operation.objects.get(pk=deferred.id).priority == -5
    ctx_op = Operation.objects.get(pk=ctx.id)
    assert (ctx_op.units_total, ctx_op.units_done, ctx_op.count) == (2, 2, 10)
    # get_result through the task and through the backend give the same answer.
    again = tasks.add.get_result(plain.id)
    assert again.status == TaskResultStatus.SUCCESSFUL and again.return_value == 5
    assert again.args == [2, 3] and again.kwargs == {}


@pytest.mark.django_db(transaction=True)
def test_a_raising_task_records_each_error_and_retries_up_to_its_ceiling(start_worker):
    backend_default = tasks.explode.enqueue("boom")  # OPTIONS MAX_ATTEMPTS = 3
    per_task = tasks.explode_twice.enqueue("nope")  # @task(max_attempts=2)
    start_worker(*QUEUES, "--poll", "0.5")
    for result in (backend_default, per_task):
        wait_until(lambda r=result: finished(r), timeout=30, message="the failing tasks to give up")

    assert backend_default.status == TaskResultStatus.FAILED
    assert len(backend_default.errors) == 3 and len(backend_default.worker_ids) == 3
    assert {e.exception_class_path for e in backend_default.errors} == {"builtins.ValueError"}
    assert all("boom" in e.traceback for e in backend_default.errors)
    assert backend_default.errors[0].exception_class is ValueError
    with pytest.raises(ValueError, match="failed"):
        _ = backend_default.return_value
    assert per_task.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in per_task.errors] == ["builtins.KeyError"] * 2
    assert Operation.objects.get(pk=per_task.id).error_code == "attempts_exhausted"


@pytest.mark.django_db(transaction=True)
def test_a_task_whose_worker_is_sigkilled_is_retried_by_another_worker(start_worker):
    result = tasks.hang_first_attempt.enqueue(seconds=120)
    first = start_worker(*QUEUES, "--poll", "0.5", "--worker-id", "doomed")
    wait_until(lambda: finished(result) or result.status == TaskResultStatus.RUNNING, timeout=20, message="RUNNING")
    first.signal(signal.SIGKILL)
    first.wait(10)
    result.refresh()
    assert result.status == TaskResultStatus.RUNNING  # the row still says so until the lease lapses
    start_worker(*QUEUES, "--poll", "0.5", "--worker-id", "rescuer")
    wait_until(lambda: finished(result), timeout=30, message="the retry to finish")
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == {"attempt": 2}
    assert result.worker_ids == ["doomed", "rescuer"]


@pytest.mark.django_db(transaction=True)
def test_enqueue_inside_a_rolled_back_transaction_leaves_nothing():
    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction.atomic():
        result = tasks.add.enqueue(1, 2)
        assert Operation.objects.filter(pk=result.id).exists()
        raise Boom
    assert not Operation.objects.exists()
    assert not WorkItem.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_non_serialisable_argument_is_refused_at_enqueue():
    with pytest.raises(InvalidTask, match="JSON-serialisable"):
        tasks.add.enqueue(object(), 1)
    with pytest.raises(InvalidTask, match="JSON-serialisable"):
        tasks.send_email.enqueue("a@b", subject={1, 2})
    assert not Operation.objects.exists() and not WorkItem.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_unknown_queue_names_are_refused_and_results_are_scoped_to_tasks():
    with pytest.raises(InvalidTask, match="Queue 'nope' is not valid"):
        tasks.add.using(queue_name="nope")
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result("op_does_not_exist")
    import operations

    op = operations.start("demo.flaky", {"failures": 0})
    with pytest.raises(TaskResultDoesNotExist):  # an operation that is not a task is not a task result
        task_backends["default"].get_result(op.id)


def test_bad_options_and_queue_names_are_named_by_manage_py_check():
    bad = {
        "default": {
            "BACKEND": "operations.tasks.backend.OperationsBackend",
            "QUEUES": ["default", "no spaces"],
            "OPTIONS": {"MAX_ATTEMPTS": 0, "RETRY_BACKOFF": 0.5, "BOGUS": 1},
        }
    }
    with override_settings(TASKS=bad):
        messages = [m for m in checks.run_checks() if m.id and m.id.startswith("operations.E10")]
        text = "\n".join(m.msg for m in messages)
        assert "MAX_ATTEMPTS" in text and "never unlimited" in text
        assert "RETRY_BACKOFF" in text and "'BOGUS'" in text
        backend = task_backends["default"]
        assert isinstance(backend, OperationsBackend) and backend.option_problems
        with pytest.raises(InvalidTask, match="misconfigured"):
            tasks.add.using(backend="default").enqueue(1, 2)


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("max_attempts", 0, "max_attempts must be an integer >= 1, not 0 .*never unlimited"),
        ("retry_delay", -1, "retry_delay must be 0 or more"),
        ("retry_backoff", 0.5, "retry_backoff must be a number >= 1"),
    ],
)
def test_bad_per_task_retry_settings_are_refused_by_name(field, value, match):
    import dataclasses

    with pytest.raises(InvalidTask, match=match):
        dataclasses.replace(tasks.add, **{field: value})


def test_options_take_timedeltas_and_keep_the_defaults_they_do_not_set():
    backend = OperationsBackend("x", {"QUEUES": ["default"], "OPTIONS": {"RETRY_DELAY": dt.timedelta(minutes=2)}})
    assert backend.option_problems == []
    assert (backend.settings["RETRY_DELAY"], backend.settings["MAX_ATTEMPTS"]) == (120.0, 3)


def test_the_backend_declares_what_it_supports():
    backend = task_backends["default"]
    assert backend.supports_defer and backend.supports_priority and backend.supports_get_result
    assert backend.supports_async_task
    assert {"default", "emails"} <= backend.queues


@pytest.mark.django_db(transaction=True)
def test_cancelling_a_pending_task_fails_it_without_running(start_ready_worker):
    result = tasks.add.using(run_after=timezone.now() + dt.timedelta(seconds=1)).enqueue(1, 2)
    cancelled = cancel(result)
    assert cancelled.status == TaskResultStatus.FAILED
    assert Operation.objects.get(pk=result.id).state == "cancelled"
    assert WorkItem.objects.get(key=result.id).outcome == "cancelled"
    # A worker running well past its run_after never runs it.
    worker = start_ready_worker("after-cancel", *QUEUES, "--poll", "0.2")
    later = tasks.add.enqueue(3, 4)  # the worker is live: this one runs
    wait_until(lambda: finished(later), timeout=30, message="the later task to run")
    time.sleep(1)
    op = Operation.objects.get(pk=result.id)
    assert (op.state, op.attempts, op.started_at) == ("cancelled", 0, None)
    assert later.return_value == 7
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0


@pytest.mark.django_db(transaction=True)
def test_cancelling_a_running_task_stops_it_when_it_looks(start_worker):
    result = tasks.until_cancelled.enqueue(seconds=60)
    start_worker(*QUEUES, "--poll", "0.5")
    wait_until(lambda: finished(result) or result.status == TaskResultStatus.RUNNING, timeout=20, message="RUNNING")
    assert cancel(result).status == TaskResultStatus.RUNNING  # asked, not yet seen
    wait_until(lambda: finished(result), timeout=20, message="the task to see the cancellation")
    assert result.status == TaskResultStatus.FAILED
    op = Operation.objects.get(pk=result.id)
    assert (op.state, op.attempts, op.cancel_requested) == ("cancelled", 1, True)
    assert WorkItem.objects.get(key=result.id).outcome == "cancelled"


@pytest.fixture
def signals_seen():
    """task_started / task_finished as this process sees them: (signal, id, status, return value)."""
    from operations import reporter as reporter_mod
    from operations.tasks.compat import task_finished, task_started

    seen = []

    def started(sender, task_result, **kwargs):
        seen.append(("started", task_result.id, task_result.status, None))

    def ended(sender, task_result, **kwargs):
        value = task_result.return_value if task_result.status == TaskResultStatus.SUCCESSFUL else None
        seen.append(("finished", task_result.id, task_result.status, value))

    task_started.connect(started)
    task_finished.connect(ended)
    reporter_mod.flusher.linger = 0.2
    yield seen
    task_started.disconnect(started)
    task_finished.disconnect(ended)
    if reporter_mod.flusher._thread is not None:
        reporter_mod.flusher._thread.join(5)
    reporter_mod.flusher.linger = 5.0


@pytest.mark.django_db(transaction=True)
def test_task_finished_is_sent_once_with_the_status_the_end_was_recorded_as(signals_seen):
    from tests.operations.conftest import run_next

    ok = tasks.add.enqueue(2, 3)
    twice = tasks.explode_twice.enqueue("nope")  # two attempts, no delay between them
    big = tasks.big_return.enqueue()
    for _ in range(50):
        if run_next("inline", "tasks.default") is None:
            if all(finished(r) for r in (ok, twice, big)):
                break
            time.sleep(0.05)
    assert [r.status for r in (ok, twice, big)] == [TaskResultStatus.SUCCESSFUL] + [TaskResultStatus.FAILED] * 2

    def events(result):
        return [(name, status, value) for name, rid, status, value in signals_seen if rid == result.id]

    running = ("started", TaskResultStatus.RUNNING, None)
    assert events(ok) == [running, ("finished", TaskResultStatus.SUCCESSFUL, 5)]
    # Retried once: started twice, finished once, after the last attempt.
    assert events(twice) == [running, running, ("finished", TaskResultStatus.FAILED, None)]
    # It returned, but its value was too large to keep: finished says FAILED, as the row does.
    assert events(big) == [running, ("finished", TaskResultStatus.FAILED, None)]
    assert Operation.objects.get(pk=big.id).error_code == "result_too_large"


def run_inline_until_finished(*results, queue="tasks.default"):
    """Run the task queue here, in this thread, the way a worker runs it, until every result ends."""
    from tests.operations.conftest import run_next

    def done():
        return all(finished(r) for r in results)

    wait_until(lambda: run_next("inline", queue) is None and done(), timeout=60, message="the tasks to finish")


@pytest.fixture
def finished_seen():
    """What a task_finished receiver sees: its payload, and what get_result says at that moment."""
    from operations import reporter as reporter_mod
    from operations.tasks.compat import task_finished

    seen = {}

    def ended(sender, task_result, **kwargs):
        reread = task_result.task.get_backend().get_result(task_result.id)
        seen.setdefault(task_result.id, []).append((task_result, reread))

    task_finished.connect(ended)
    reporter_mod.flusher.linger = 0.2
    yield seen
    task_finished.disconnect(ended)
    if reporter_mod.flusher._thread is not None:
        reporter_mod.flusher._thread.join(5)
    reporter_mod.flusher.linger = 5.0


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("task_name", "exception_path", "text"),
    [
        ("fail_system_exit", "builtins.SystemExit", "SystemExit: This task failed due to SystemExit"),
        ("call_exit", "builtins.SystemExit", "SystemExit"),
        ("complex_return_value", "builtins.TypeError", "Unsupported type"),
        ("fail_value_error", "builtins.ValueError", "ValueError: This task failed due to ValueError"),
    ],
)
def test_every_failed_ending_sends_task_finished_once_it_is_recorded(finished_seen, task_name, exception_path, text):
    result = getattr(tasks, task_name).enqueue()
    run_inline_until_finished(result)

    assert result.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in result.errors] == [exception_path]
    assert text in result.errors[0].traceback
    # Sent once, after the end was saved: the payload is the saved result, and get_result says so too.
    [(payload, reread)] = finished_seen[result.id]
    assert payload.status == reread.status == TaskResultStatus.FAILED
    assert payload.finished_at is not None and payload.finished_at == reread.finished_at == result.finished_at
    assert [e.exception_class_path for e in payload.errors] == [exception_path]
    assert payload.errors == reread.errors
    with pytest.raises(ValueError, match="Task failed"):
        _ = payload.return_value


@pytest.mark.django_db(transaction=True)
def test_task_finished_for_a_success_carries_the_saved_result(finished_seen):
    result = tasks.meaning_of_life.enqueue()
    run_inline_until_finished(result)
    [(payload, reread)] = finished_seen[result.id]
    assert payload.status == reread.status == TaskResultStatus.SUCCESSFUL
    assert payload.return_value == reread.return_value == 42
    assert payload.finished_at == reread.finished_at == result.finished_at
    assert payload == reread == result


# -- .using() options survive the round trip (issue 10, point 1) ------------------------------


@pytest.mark.django_db(transaction=True)
def test_get_result_returns_the_task_as_enqueued_with_its_using_options():
    run_after = timezone.now() + dt.timedelta(hours=1)
    result = tasks.noop.using(priority=20, queue_name="queue_1", run_after=run_after).enqueue(1, two=3)

    again = tasks.noop.get_result(result.id)
    assert (again.task.priority, again.task.queue_name, again.task.run_after) == (20, "queue_1", run_after)
    assert again.task == result.task and again.backend == result.backend == "default"
    assert again == result
    result.refresh()
    assert result == again
    op = Operation.objects.get(pk=result.id)
    assert (op.queue, op.priority) == ("tasks.queue_1", 20)
    assert WorkItem.objects.get(key=result.id).run_after == run_after


@pytest.mark.django_db(transaction=True)
def test_a_task_enqueued_on_another_backend_reads_back_and_runs_as_that_backends(start_worker):
    from django.utils.crypto import get_random_string

    seen = tasks.task_id_and_backend.using(backend="other", priority=7).enqueue()
    failing = tasks.explode.using(backend="other").enqueue("once")  # "other" allows one attempt
    assert (seen.backend, seen.task.backend) == ("other", "other")

    other = task_backends["other"]
    assert other.get_result(seen.id) == seen
    with pytest.raises(TaskResultDoesNotExist):  # each backend answers for its own results
        task_backends["default"].get_result(seen.id)
    with pytest.raises(TaskResultDoesNotExist):
        tasks.task_id_and_backend.get_result(seen.id)
    assert Operation.objects.get(pk=seen.id).owner == "other-owner"

    start_worker("--queue", "tasks.default", "--poll", "0.5", "--worker-id", get_random_string(8))
    for result in (seen, failing):
        wait_until(lambda r=result: finished(r), timeout=30, message=f"{result.id} to finish")
    # Inside the run, context.task_result is the result of backend "other", task options and all.
    assert seen.return_value == {
        "id": seen.id,
        "backend": "other",
        "task_backend": "other",
        "queue_name": "default",
        "priority": 7,
    }
    assert seen.task.backend == "other" and seen.task.priority == 7
    assert failing.status == TaskResultStatus.FAILED and len(failing.errors) == 1


# -- BaseException in a task (issue 10, point 4) ----------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_keyboard_interrupt_in_a_task_fails_it_and_the_single_runner_goes_on(start_ready_worker):
    interrupted = tasks.interrupt.enqueue()
    worker = start_ready_worker("ki-worker", "--queue", "tasks.default", "--concurrency", "1", "--poll", "0.5")
    wait_until(lambda: finished(interrupted), timeout=30, message="the interrupted task to be recorded")
    after = tasks.add.enqueue(20, 22)  # the only runner thread must still be there to run it
    wait_until(lambda: finished(after), timeout=30, message="a task after the interrupt to run")

    assert interrupted.status == TaskResultStatus.FAILED, worker.output()[-3000:]
    [error] = interrupted.errors
    assert error.exception_class is KeyboardInterrupt
    assert error.traceback.endswith("KeyboardInterrupt: This task failed due to KeyboardInterrupt\n")
    entry = Operation.objects.get(pk=interrupted.id).attempt_log[-1]
    assert entry["exception"] == "builtins.KeyboardInterrupt" and entry["worker_id"] == "ki-worker"
    assert after.status == TaskResultStatus.SUCCESSFUL and after.return_value == 42
    assert worker.alive()
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0


# -- the smaller differences (issue 10, point 5) ----------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_non_json_arguments_raise_an_error_that_is_both_invalid_task_and_type_error():
    from operations.tasks.backend import InvalidTaskArguments

    for bad in (dt.datetime.now(), object()):
        with pytest.raises(TypeError, match="Unsupported type") as caught:
            tasks.noop.enqueue(bad)
        assert isinstance(caught.value, InvalidTask) and isinstance(caught.value, InvalidTaskArguments)
    with pytest.raises(InvalidTask, match="JSON-serialisable"):
        tasks.noop.enqueue(float("nan"))
    assert not Operation.objects.exists() and not WorkItem.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_whole_float_priority_is_accepted_as_django_accepts_it():
    result = tasks.noop.using(priority=3.0).enqueue()
    assert Operation.objects.get(pk=result.id).priority == 3
    assert tasks.noop.get_result(result.id) == result
    with pytest.raises(InvalidTask, match="priority must be a whole number between -100 and 100"):
        tasks.noop.using(priority=3.1)


@pytest.mark.django_db(transaction=True)
def test_an_empty_queues_list_takes_any_queue_name_as_django_does():
    empty = {"default": {"BACKEND": "operations.tasks.backend.OperationsBackend", "QUEUES": []}}
    with override_settings(TASKS=empty):
        assert [m.id for m in checks.run_checks() if m.id.startswith("operations.E10")] == []
        result = tasks.noop.using(queue_name="anything").enqueue()
        assert WorkItem.objects.get(key=result.id).queue == "tasks.anything"
        assert Operation.objects.get(pk=result.id).queue == "tasks.anything"


@pytest.mark.django_db(transaction=True)
def test_task_kinds_made_on_demand_are_not_listed_as_registered_kinds():
    from operations.registry import registry

    result = tasks.meaning_of_life.enqueue()
    run_inline_until_finished(result)
    assert registry.get(f"task.{tasks.meaning_of_life.module_path}").kind == f"task.{tasks.meaning_of_life.module_path}"
    # What this process happened to run must not grow the list an unknown kind's error (and
    # the admin's kind filter) shows.
    assert not [kind for kind in registry.kinds() if kind.startswith("task.")]


@pytest.mark.django_db(transaction=True)
def test_the_group_kwarg_option_puts_each_task_in_its_arguments_group():
    grouped = {
        "default": {
            "BACKEND": "operations.tasks.backend.OperationsBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"GROUP_KWARG": "subject"},
        }
    }
    with override_settings(TASKS=grouped):
        result = tasks.send_email.enqueue("a@example.com", subject="tenant-9")
        bare = tasks.add.enqueue(1, 2)
        assert WorkItem.objects.get(key=result.id).group_key == "tenant-9"
        assert WorkItem.objects.get(key=bare.id).group_key is None


@pytest.mark.django_db(transaction=True)
def test_a_first_attempt_reports_started_and_finished_without_reading_the_row_again(signals_seen):
    """A run's statements are its begin and its finish: the started result is built from the
    begin's row (its one attempt is the one begin opened) and the finished one from the row the
    finish returned, with no ORM read of the operation in between."""
    from operations import runner
    from tests.conftest import statements_run
    from tests.operations.conftest import claim_one
    from workqueue.worker.context import Context

    result = tasks.add.enqueue(2, 3)
    item = claim_one("inline", "tasks.default")
    with statements_run() as ran:  # the SQL text on every Django version (5.2's query log has None)
        runner.handle(item, Context(item, None, "inline", "default"))
    table = Operation._meta.db_table
    assert len(ran) >= 2, ran  # the begin and the finish, at least
    reads = [sql for sql in ran if sql.lstrip().upper().startswith("SELECT") and table in sql]
    assert reads == []
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 5
    assert [e[:3] for e in signals_seen if e[1] == result.id] == [
        ("started", result.id, TaskResultStatus.RUNNING),
        ("finished", result.id, TaskResultStatus.SUCCESSFUL),
    ]
