"""Why a run was stopped: ``reporter.stop_reason``, and ``is_cancelled()`` only for a caller's cancel."""

from __future__ import annotations

import signal

import pytest
from django.conf import settings
from django.test import override_settings

import operations
from operations import runner
from operations.models import Operation
from tests.conftest import wait_until
from tests.operations.conftest import begin, claim_one, in_thread, op_row, reporter_for
from tests.testapp.models import OperationRun, Sample
from workqueue import StopReason
from workqueue.models import WorkItem
from workqueue.sweeps import reap as reaper
from workqueue.worker.context import Context

pytestmark = pytest.mark.django_db(transaction=True)

PAST = "2000-01-01T00:00:00Z"


def running(kind: str = "test.ops.count"):
    op = operations.start(kind, {})
    item, began = begin(op.id)
    return item, began, reporter_for(item, began)


def test_a_requested_cancellation_is_cancel_requested():
    _item, began, reporter = running()
    assert reporter.stop_reason is None and not reporter.is_cancelled()
    operations.cancel(began.id)
    reporter.advance(1)
    assert reporter.flush().cancel_requested
    assert reporter.stop_reason is StopReason.CANCEL_REQUESTED
    assert reporter.is_cancelled() and reporter.cancelled.is_set()


def test_cancel_key_on_its_work_item_is_cancel_requested():
    item, _began, reporter = running()
    WorkItem.objects.cancel_key(item.key)
    reporter.advance(1)
    assert not reporter.flush().held
    assert reporter.stop_reason == "cancel_requested" and reporter.is_cancelled()


def test_another_worker_taking_the_operation_over_is_lease_lost():
    item, began, reporter = running()
    WorkItem.objects.filter(pk=item.id).update(lease_expires_at=PAST)
    Operation.objects.filter(pk=began.id).update(claimed_until=PAST)
    begin(began.id, worker_id="heir")
    reporter.advance(1)
    assert not reporter.flush().held
    assert reporter.stop_reason == "lease_lost"
    assert reporter.cancelled.is_set() and not reporter.is_cancelled()


def test_a_hard_timeout_is_timeout():
    queues = {**settings.WORKQUEUE["QUEUES"], "operations": {"lease": 3, "hard_timeout": 60}}
    with override_settings(WORKQUEUE={**settings.WORKQUEUE, "QUEUES": queues}):
        _item, began, reporter = running()
        assert reaper.fail_hard_timeouts(now="2999-01-01T00:00:00Z") == 1
    assert op_row(began.id).error.code == "hard_timeout"
    reporter.advance(1)
    assert not reporter.flush().held
    assert reporter.stop_reason == "timeout"
    assert reporter.cancelled.is_set() and not reporter.is_cancelled()


def test_the_workers_shutdown_reaches_the_run_as_shutdown_and_a_later_cancel_does_not_replace_it():
    op = operations.start("test.ops.hold", {"seconds": 60})
    item = claim_one("leaving")
    ctx = Context(item, None, "leaving", "default")
    thread = in_thread(runner.handle, item, ctx)
    wait_until(lambda: OperationRun.objects.filter(op_id=op.id).exists(), message="the run to begin")
    ctx.stop(StopReason.SHUTDOWN)  # what runworker's shutdown does to the hold at the end of its grace
    thread.join(10)
    assert not thread.is_alive()
    assert ctx.stop_reason is StopReason.SHUTDOWN and not ctx.is_cancelled()
    ctx.stop(StopReason.CANCEL_REQUESTED)
    assert ctx.stop_reason is StopReason.SHUTDOWN  # the first reason given wins
    assert op_row(op.id).state == "running"  # not recorded: the worker releases it


def test_a_reporter_shares_the_workers_reason_both_ways():
    item, began, _ = running()
    ctx = Context(item, None, "w", "default")
    reporter = operations.Reporter(
        op_id=began.id,
        item_id=item.id,
        token=item.lease_token,
        attempt=operations.Attempt(id=began.id, number=began.attempts, final=False),
        lease=60,
        interval=60,
        stops=ctx,
    )
    operations.cancel(began.id)
    reporter.advance(1)
    reporter.flush()
    assert ctx.stop_reason == reporter.stop_reason == "cancel_requested"
    assert ctx.is_cancelled() and ctx.cancelled.is_set() and reporter.is_cancelled()


def why(op_id: str) -> list[tuple[str, int]]:
    prefix = f"why:{op_id}:"
    rows = Sample.objects.filter(name__startswith=prefix).values_list("name", "value")
    return [(name.removeprefix(prefix), value) for name, value in rows]


def test_a_deploy_stops_a_run_under_runworker_as_shutdown_not_as_a_cancel(ops_worker):
    leaving = ops_worker("why-leaving", "--grace", "0.5")
    op = operations.start("test.ops.why", {"seconds": 60})
    wait_until(lambda: OperationRun.objects.filter(op_id=op.id).exists(), message="the run to begin")
    leaving.signal(signal.SIGTERM)
    assert leaving.wait(30) == 0, leaving.output()[-3000:]
    assert why(op.id) == [("shutdown", 0)], leaving.output()[-3000:]
    assert op_row(op.id).state == "pending"  # released for the next worker, not cancelled


def test_a_cancel_reaches_a_run_under_runworker_as_cancel_requested(ops_worker):
    worker = ops_worker("why-staying")
    op = operations.start("test.ops.why", {"seconds": 60})
    wait_until(lambda: OperationRun.objects.filter(op_id=op.id).exists(), message="the run to begin")
    operations.cancel(op.id)
    wait_until(lambda: why(op.id), timeout=20, message="the run to see the cancel")
    assert why(op.id) == [("cancel_requested", 1)]
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0
