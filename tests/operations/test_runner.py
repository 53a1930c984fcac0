"""The runner's outcome rules, with the real handler run in this process (``run_next``).

Every test here is transactional: the handler's flushes run on the flusher thread's own
connection, which only sees committed rows.
"""

from __future__ import annotations

import uuid

import pytest

import operations
from operations import runner, store
from operations.models import Operation
from operations.registry import registry
from tests.conftest import wait_until
from tests.operations.conftest import begin, claim_one, in_thread, items_for, op_row, run_next, run_to_end
from tests.testapp.models import OperationRun
from tests.workqueue.conftest import run_threads
from workqueue.models import WorkItem
from workqueue.worker import Context

pytestmark = pytest.mark.django_db(transaction=True)


def runs(op_id: str, event: str = "began") -> list[tuple[int, bool]]:
    return list(OperationRun.objects.filter(op_id=op_id, event=event).order_by("id").values_list("attempt", "final"))


def test_both_progress_tiers_land_on_the_row_and_success_completes_the_units():
    op = operations.start("test.ops.tiers", {"units": 3, "per_unit": 100})
    done = run_to_end(op.id)
    assert (done.state, done.done, done.attempts) == ("succeeded", True, 1)
    progress = done.progress
    assert (progress.units_total, progress.units_done, progress.count, progress.count_label) == (3, 3, 300, "rows")
    assert progress.fraction() == 1.0 and progress.message == "working on unit 3 of 3"
    assert (done.result.uri, done.result.detail) == (f"memory://tiers/{op.id}", {"units": 3})
    assert done.error is None and done.finished_at >= done.started_at >= done.created_at
    assert [entry["outcome"] for entry in done.attempt_log] == ["succeeded"]
    assert done.attempt_log[0]["worker_id"] == "inline" and done.attempt_log[0]["finished_at"]
    item = items_for(op.id).get()
    assert (item.state, item.outcome) == ("stopped", "succeeded")


def test_a_typed_kind_started_from_a_mapping_runs_with_its_dataclass():
    op = operations.start("test.ops.typed", {"name": "from-a-dict"})
    done = run_to_end(op.id)
    assert done.state == "succeeded"
    assert done.result.detail == {"type": "TypedRequest", "name": "from-a-dict", "size": 1}


def test_a_run_without_units_succeeds_with_no_fraction():
    op = operations.start("test.ops.count", {"steps": 4, "per_step": 1000})
    done = run_to_end(op.id)
    assert done.state == "succeeded" and done.result.uri == "" and done.result.detail is None
    assert (done.progress.units_total, done.progress.count) == (None, 4000)
    assert done.progress.fraction() is None


def test_retries_run_to_exhaustion_and_fail_with_the_last_error():
    op = operations.start("test.ops.fail", {})
    run_next()
    after_one = op_row(op.id)
    assert (after_one.state, after_one.attempts, after_one.error.code, after_one.error.retryable) == (
        "pending",
        1,
        "upstream_down",
        True,
    )
    assert items_for(op.id).get().state == "queued"
    done = run_to_end(op.id)
    assert (done.state, done.attempts) == ("failed", 3)
    assert done.error.code == "attempts_exhausted" and done.error.retryable is True
    assert "the upstream was down on attempt 3" in done.error.message and "after 3 attempts" in done.error.message
    assert runs(op.id) == [(1, False), (2, False), (3, True)]
    assert [e["outcome"] for e in done.attempt_log] == ["retried", "retried", "failed"]
    assert [e["number"] for e in done.attempt_log] == [1, 2, 3]
    item = items_for(op.id).get()
    assert (item.state, item.outcome) == ("stopped", "failed")


def test_unretryable_fails_at_once_with_its_code():
    op = operations.start("test.ops.unretryable", {"subject": "s-1"})
    run_next()
    done = op_row(op.id)
    assert (done.state, done.attempts) == ("failed", 1)
    assert (done.error.code, done.error.message, done.error.retryable) == (
        "no_such_subject",
        "subject s-1 does not exist",
        False,
    )
    assert done.attempt_log[0]["exception"] == "operations.runner.Fail"


def test_unretryable_is_an_exception_class_and_the_attempt_records_the_exception_it_wraps():
    assert issubclass(operations.Unretryable, Exception)
    wrapped = operations.Fail("gone", "it is gone")
    marked = operations.Unretryable(wrapped)
    assert isinstance(marked, operations.Unretryable) and marked.exception is wrapped
    assert operations.is_unretryable(marked) and not operations.is_unretryable(wrapped)
    assert operations.is_unretryable(operations.Fail("gone", retryable=False))
    op = operations.start("test.ops.unretryable", {"subject": "s-2"})
    run_next()
    entry = op_row(op.id).attempt_log[0]
    assert entry["exception"] == "operations.runner.Fail"  # what the run raised, not the marker
    assert "in unretryable" in entry["traceback"] and "subject s-2 does not exist" in entry["traceback"]


def test_unretryable_wrapping_any_exception_fails_at_once_under_internal():
    op = operations.start("test.ops.unretryable_error", {"subject": "s-3"})
    run_next()
    done = op_row(op.id)
    assert (done.state, done.attempts) == ("failed", 1)
    assert (done.error.code, done.error.message, done.error.retryable) == (
        "internal",
        "ValueError: subject s-3 is malformed",
        False,
    )
    assert done.attempt_log[0]["exception"] == "builtins.ValueError"


def test_an_unclassified_exception_is_retried_under_internal_then_exhausted():
    op = operations.start("test.ops.crash", {})
    run_next()
    after_one = op_row(op.id)
    assert (after_one.state, after_one.error.code, after_one.error.retryable) == ("pending", "internal", True)
    assert after_one.error.message == "RuntimeError: kaboom on attempt 1"
    entry = after_one.attempt_log[0]
    assert entry["exception"] == "builtins.RuntimeError" and "kaboom on attempt 1" in entry["traceback"]
    assert entry["error_code"] == "internal" and entry["outcome"] == "retried"
    done = run_to_end(op.id)
    assert (done.state, done.error.code, done.attempts) == ("failed", "attempts_exhausted", 2)
    assert done.error.message.startswith("internal: RuntimeError: kaboom on attempt 2")


def test_an_unknown_kind_fails_at_once_without_retrying():
    # A row written by a build that knew a kind this one does not.
    Operation.objects.create(id="op_orphan", kind="test.ops.nobody", request={}, max_attempts=5)
    WorkItem.objects.enqueue("operations", "op_orphan", max_attempts=5)
    run_next()
    done = op_row("op_orphan")
    assert (done.state, done.attempts, done.error.code, done.error.retryable) == ("failed", 1, "unknown_kind", False)
    assert "test.ops.nobody" in done.error.message and "test.ops.tiers" in done.error.message
    assert run_next() is None  # nothing left to retry
    item = items_for("op_orphan").get()
    assert (item.state, item.outcome) == ("stopped", "failed")


def test_a_kind_unregistered_after_start_fails_unknown_kind():
    op = operations.start("test.ops.count", {})
    definition = registry.get("test.ops.count")
    registry.unregister("test.ops.count")
    try:
        run_next()
    finally:
        registry.add(definition)
    done = op_row(op.id)
    assert (done.state, done.error.code, done.attempts) == ("failed", "unknown_kind", 1)
    assert not OperationRun.objects.filter(op_id=op.id).exists()


def test_a_result_detail_over_16_kib_is_refused_without_retry():
    op = operations.start("test.ops.bigresult", {})
    run_next()
    done = op_row(op.id)
    assert (done.state, done.attempts, done.error.code, done.error.retryable) == (
        "failed",
        1,
        "result_too_large",
        False,
    )
    assert "16,384-byte" in done.error.message and done.result_detail is None
    assert items_for(op.id).get().outcome == "failed"


def test_progress_and_error_messages_are_truncated_to_1024_characters():
    op = operations.start("test.ops.chatty", {})
    run_next()
    done = op_row(op.id)
    assert done.state == "failed" and done.error.code == "too_chatty"
    assert len(done.message) == 1024 and done.message.startswith("mmm")
    assert len(done.error.message) == 1024 and done.error.message.startswith("eee")
    assert len(done.attempt_log[0]["error_message"]) == 1024


def test_a_retry_restarts_its_units_but_never_rewinds_the_count():
    op = operations.start("test.ops.partial", {})
    run_next()
    first = op_row(op.id)
    assert (first.units_total, first.units_done, first.count) == (3, 2, 20)
    done = run_to_end(op.id)
    assert done.state == "failed" and done.error.code == "attempts_exhausted"
    # Two units of the second attempt, not 2 + 2 of 3.
    assert (done.units_total, done.units_done, done.count) == (3, 2, 40)


def test_cancelling_a_running_operation_whose_run_checks_cancels_it():
    op = operations.start("test.ops.hold", {"seconds": 20})
    worker = in_thread(run_next)
    wait_until(lambda: runs(op.id), message="the run to start")
    assert op_row(op.id).state == "running"
    flagged = operations.cancel(op.id)
    assert (flagged.state, flagged.cancel_requested) == ("running", True)
    worker.join(10)
    assert not worker.is_alive()
    done = op_row(op.id)
    assert (done.state, done.cancel_requested, done.error) == ("cancelled", True, None)
    assert done.result is None and done.attempt_log[-1]["outcome"] == "cancelled"
    assert items_for(op.id).get().outcome == "cancelled"


def test_cancelling_a_running_operation_whose_run_never_checks_lets_it_succeed():
    op = operations.start("test.ops.hold", {"seconds": 1.5, "honour_cancel": False})
    worker = in_thread(run_next)
    wait_until(lambda: runs(op.id), message="the run to start")
    operations.cancel(op.id)
    # The flag reaches the run (a flush brings it back), but the run never looks.
    wait_until(lambda: op_row(op.id).revision > 3 or not worker.is_alive(), message="a flush")
    worker.join(10)
    done = op_row(op.id)
    assert (done.state, done.cancel_requested) == ("succeeded", True)
    assert done.result.detail == {"stopped": "deadline"}


def test_a_run_that_raises_after_a_requested_cancellation_is_cancelled_with_code_cancelled():
    from project.demo.kinds import ExportRequest

    op = operations.start("demo.export", ExportRequest(units=20, records_per_unit=10, seconds_per_unit=0.1))
    worker = in_thread(run_next)
    wait_until(lambda: op_row(op.id).units_done >= 1, message="a unit to finish")
    operations.cancel(op.id)
    worker.join(15)
    done = op_row(op.id)
    assert (done.state, done.error.code, done.error.retryable) == ("cancelled", "cancelled", False)
    assert done.error.message.startswith("stopped after ") and done.units_done < 20


def test_a_cancel_requested_before_a_retry_begins_is_seen_at_once():
    op = operations.start("test.ops.hold", {"seconds": 20})
    item, _began = begin(op.id)
    operations.cancel(op.id)  # running: only the flag
    # The holder dies; the next worker's begin sees the flag and ends it without running it.
    WorkItem.objects.filter(pk=item.id).update(lease_expires_at="2000-01-01T00:00:00Z")
    Operation.objects.filter(pk=op.id).update(claimed_until="2000-01-01T00:00:00Z")
    run_next()
    done = op_row(op.id)
    assert (done.state, done.attempts) == ("cancelled", 1)
    assert runs(op.id) == []


def test_a_refused_begin_settles_its_item_as_a_no_op_and_charges_no_attempt():
    op = operations.start("test.ops.count", {"steps": 1})
    finished = run_to_end(op.id)
    stray, created = WorkItem.objects.enqueue("operations", op.id)  # e.g. a late duplicate offer
    assert created
    run_next()
    item = WorkItem.objects.get(pk=stray.id)
    assert (item.state, item.outcome, item.attempts) == ("stopped", "stopped", 0)
    after = op_row(op.id)
    assert (after.state, after.attempts, after.revision) == ("succeeded", 1, finished.revision)


def test_an_operation_whose_attempts_are_spent_is_failed_by_begin_with_the_last_error():
    op = operations.start("test.ops.fail", {})
    Operation.objects.filter(pk=op.id).update(attempts=3, error_code="upstream_down", error_message="it was down")
    run_next()
    done = op_row(op.id)
    assert (done.state, done.attempts, done.error.code, done.error.message, done.error.retryable) == (
        "failed",
        3,
        "attempts_exhausted",
        "it was down",
        True,
    )
    assert not OperationRun.objects.filter(op_id=op.id).exists()
    assert items_for(op.id).get().outcome == "failed"


def test_exactly_one_of_many_concurrent_begins_wins():
    op = operations.start("test.ops.count", {})
    item = WorkItem.objects.claim(["operations"], limit=1, worker_id="claimer").items[0]
    barrier_results = run_threads(
        lambda i: store.run(
            "op_begin",
            {"id": op.id, "item_id": item.id, "token": item.lease_token, "lease": 3, "worker_id": f"w{i}"},
        ),
        8,
    )
    winners = [rows for rows in barrier_results if rows]
    assert len(winners) == 1
    row = op_row(op.id)
    assert (row.state, row.attempts, len(row.attempt_log)) == ("running", 1, 1)


def test_begin_needs_the_work_item_held_under_the_same_token():
    op = operations.start("test.ops.count", {})
    item = WorkItem.objects.claim(["operations"], limit=1, worker_id="claimer").items[0]
    params = {"id": op.id, "item_id": item.id, "lease": 3, "worker_id": "w"}
    assert store.run("op_begin", {**params, "token": uuid.uuid4()}) == []
    row = op_row(op.id)
    assert (row.state, row.attempts, row.attempt_log) == ("pending", 0, [])
    assert store.run("op_begin", {**params, "token": item.lease_token}) != []


def test_a_stale_holder_cannot_finish_an_operation_another_worker_took_over():
    op = operations.start("test.ops.hold", {"seconds": 20})
    worker = in_thread(run_next, "stale")
    wait_until(lambda: runs(op.id), message="the first run")
    # The first holder goes silent long enough to lose its lease (pinned, not slept).
    Operation.objects.filter(pk=op.id).update(claimed_until="2000-01-01T00:00:00Z")
    WorkItem.objects.filter(key=op.id).update(lease_expires_at="2000-01-01T00:00:00Z")
    heir = in_thread(run_next, "heir")
    wait_until(lambda: len(runs(op.id)) == 2, message="the heir to begin")
    # The stale run's next flush finds the hold gone and stops; it records nothing.
    worker.join(10)
    assert not worker.is_alive()
    assert op_row(op.id).state == "running" and op_row(op.id).worker_id == "heir"
    operations.cancel(op.id)
    heir.join(10)
    done = op_row(op.id)
    assert (done.state, done.attempts) == ("cancelled", 2)
    assert [e["worker_id"] for e in done.attempt_log] == ["stale", "heir"]
    assert "finished_at" not in done.attempt_log[0]


def test_progress_calls_inside_the_runs_own_transaction_neither_deadlock_nor_join_it():
    from tests.testapp.models import Sample
    from tests.workqueue.conftest import terminate_other_backends

    op = operations.start("test.ops.atomic", {})
    worker = in_thread(run_next)
    worker.join(20)
    if worker.is_alive():
        terminate_other_backends()  # unblock the stuck threads so the database can be cleaned
        pytest.fail("the run deadlocked with the flusher")
    done = op_row(op.id)
    assert (done.state, done.units_done, done.count) == ("succeeded", 2, 16)
    assert Sample.objects.filter(name=f"atomic:{op.id}").count() == 2


def test_cancelling_an_operation_waiting_for_a_retry_cancels_it_without_the_retrys_error():
    op = operations.start("test.ops.fail", {})
    run_next()
    waiting = op_row(op.id)
    assert (waiting.state, waiting.error.code) == ("pending", "upstream_down")  # why it is retrying
    cancelled = operations.cancel(op.id)
    assert (cancelled.state, cancelled.error) == ("cancelled", None)
    assert cancelled.attempt_log[0]["error_code"] == "upstream_down"  # the attempt's story is kept
    assert items_for(op.id).get().outcome == "cancelled"
    assert run_next() is None


def test_the_demo_kinds_retry_and_fail_for_good_as_they_say():
    flaky = operations.start("demo.flaky", {"failures": 2})
    done = run_to_end(flaky.id)
    assert (done.state, done.attempts, done.result.detail) == ("succeeded", 3, {"succeeded_on_attempt": 3})
    assert [e["outcome"] for e in done.attempt_log] == ["retried", "retried", "succeeded"]
    doomed = operations.start("demo.doomed", {"subject": "s-9"})
    done = run_to_end(doomed.id)
    assert (done.state, done.attempts, done.error.code) == ("failed", 1, "no_such_subject")
    assert done.message == "checking the subject"


def test_a_worker_stopping_the_run_reaches_it_at_once_and_records_no_outcome():
    # A stand-in for runworker's shutdown: the Context's cancel event, set while
    # this worker still holds the operation (no flush would ever report a cancellation).
    op = operations.start("test.ops.hold", {"seconds": 60})
    item = claim_one("leaving")
    ctx = Context(item, None, "leaving", "default")
    thread = in_thread(runner.handle, item, ctx)
    wait_until(lambda: runs(op.id), message="the run to begin")
    ctx.cancelled.set()
    thread.join(10)  # the run stops at once, not when its 60 seconds are up
    assert not thread.is_alive()
    assert runs(op.id, "returned") == [(1, False)]  # it saw the stop and returned
    assert not ctx.settled  # left to the worker, which releases the item at shutdown
    row = op_row(op.id)
    assert (row.state, row.attempts, row.error, row.result) == ("running", 1, None, None)
    assert not row.cancel_requested
