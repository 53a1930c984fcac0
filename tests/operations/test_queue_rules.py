"""When a queue rule settles an operations work item by itself, the operation follows in the
same transaction: force stop and cancel_key cancel it, spent attempts and hard timeouts fail
it, an operator's requeue hands it to the next worker."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import override_settings

import operations
from operations.models import Operation
from tests.conftest import wait_until
from tests.operations.conftest import begin, claim_one, in_thread, items_for, op_row, run_next
from tests.testapp.models import OperationRun
from workqueue.models import WorkItem
from workqueue.sweeps import reap as reaper

pytestmark = pytest.mark.django_db(transaction=True)

PAST = "2000-01-01T00:00:00Z"


def running_in_thread(request=None):
    op = operations.start("test.ops.hold", request or {"seconds": 20})
    thread = in_thread(run_next)
    wait_until(lambda: OperationRun.objects.filter(op_id=op.id).exists(), message="the run to begin")
    return op, thread


def test_force_stopping_a_running_operations_item_cancels_the_operation_and_stops_the_run():
    op, thread = running_in_thread()
    item = items_for(op.id).get()
    (stopped,) = WorkItem.objects.force_stop([item.id])
    assert stopped.key == op.id
    row = op_row(op.id)
    assert (row.state, row.cancel_requested, row.error.code) == ("cancelled", True, "cancelled")
    assert "force-stopped" in row.error.message and row.lease_token is None
    thread.join(10)
    assert not thread.is_alive()  # its next flush found the hold gone
    after = op_row(op.id)
    assert (after.state, after.error.code) == ("cancelled", "cancelled")  # the run's end was refused
    assert items_for(op.id).get().outcome == "cancelled"


def test_force_stopping_a_pending_operations_item_cancels_the_operation():
    op = operations.start("test.ops.count", {})
    WorkItem.objects.force_stop([items_for(op.id).get().id])
    row = op_row(op.id)
    assert (row.state, row.done) == ("cancelled", True)
    assert run_next() is None


def test_cancel_key_on_a_running_operation_cancels_it():
    op, thread = running_in_thread()
    WorkItem.objects.cancel_key(op.id)
    row = op_row(op.id)
    assert (row.state, row.cancel_requested, row.finished_at is not None) == ("cancelled", True, True)
    thread.join(10)
    assert not thread.is_alive()
    assert op_row(op.id).state == "cancelled"


def test_attempts_spent_on_lapsed_leases_fail_the_operation_with_the_last_error():
    op = operations.start("test.ops.fail", {})  # max_attempts 3
    run_next()
    run_next()
    assert op_row(op.id).error.message == "the upstream was down on attempt 2"
    item, began = begin(op.id, worker_id="doomed")
    assert began.attempts == 3
    # Its worker dies: both halves of the one lease lapse (pinned, not slept).
    WorkItem.objects.filter(pk=item.id).update(lease_expires_at=PAST)
    Operation.objects.filter(pk=op.id).update(claimed_until=PAST)
    assert claim_one("next") is None  # the claim settles it instead of handing it out again
    row = op_row(op.id)
    assert (row.state, row.error.code, row.error.retryable) == ("failed", "attempts_exhausted", True)
    assert row.error.message == "the upstream was down on attempt 2"
    assert items_for(op.id).get().outcome == "failed"


def test_a_hard_timeout_fails_the_operation():
    queues = {**settings.WORKQUEUE["QUEUES"], "operations": {"lease": 3, "hard_timeout": 60}}
    with override_settings(WORKQUEUE={**settings.WORKQUEUE, "QUEUES": queues}):
        op = operations.start("test.ops.count", {})
        begin(op.id)
        assert reaper.fail_hard_timeouts() == 0
        assert reaper.fail_hard_timeouts(now="2999-01-01T00:00:00Z") == 1
    row = op_row(op.id)
    assert (row.state, row.error.code, row.error.retryable, row.done) == ("failed", "hard_timeout", False, True)
    assert items_for(op.id).get().outcome == "failed"


def test_an_operators_requeue_hands_a_running_operation_to_the_next_worker():
    op, stale = running_in_thread()
    WorkItem.objects.requeue_now([items_for(op.id).get().id])
    stale.join(10)
    assert not stale.is_alive()  # it lost the operation at its next flush
    assert op_row(op.id).state == "running"
    heir = in_thread(run_next, "heir")
    wait_until(
        lambda: OperationRun.objects.filter(op_id=op.id, event="began").count() == 2,
        message="the next worker to begin",
    )
    assert op_row(op.id).worker_id == "heir"
    operations.cancel(op.id)
    heir.join(10)
    row = op_row(op.id)
    assert (row.state, row.attempts) == ("cancelled", 2)
