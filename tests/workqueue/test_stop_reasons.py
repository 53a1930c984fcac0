"""Why a run was stopped: ``ctx.stop_reason``, one reason each, and ``is_cancelled()`` only for a cancel.

Each test runs the handler in a real ``manage.py runworker`` (test.why*: it waits until told
to stop, then records Sample ``why:<key>:<ctx.stop_reason>`` valued ``ctx.is_cancelled()``).
"""

from __future__ import annotations

import datetime as dt
import signal

import pytest
from django.db.models import F

from tests.conftest import wait_until
from tests.testapp.models import Sample
from tests.workqueue.conftest import row
from workqueue import StopReason
from workqueue.models import WorkItem
from workqueue.sweeps import reap as reaper
from workqueue.worker.lease import Hold

pytestmark = pytest.mark.django_db(transaction=True)


def started(key: str) -> bool:
    return Sample.objects.filter(name=f"started:{key}").exists()


def why(key: str) -> list[tuple[str, int]]:
    """(stop reason, is_cancelled) for each run of ``key`` that was told to stop."""
    prefix = f"why:{key}:"
    return [
        (name.removeprefix(prefix), value)
        for name, value in Sample.objects.filter(name__startswith=prefix).values_list("name", "value")
    ]


def stopped_once(key: str, proc) -> tuple[str, int]:
    wait_until(lambda: why(key) or not proc.alive(), timeout=30, message=f"{key}'s handler to be told to stop")
    assert why(key), proc.output()[-3000:]
    return why(key)[0]


def test_a_callers_cancel_is_cancel_requested_and_the_only_one_is_cancelled_says_yes(make_worker_ready):
    WorkItem.objects.enqueue("test.why", "unwanted")
    proc = make_worker_ready("why-cancel", "--queue", "test.why")
    wait_until(lambda: started("unwanted"), timeout=20, message="the handler to start")
    assert [i.key for i in WorkItem.objects.cancel_key("unwanted")] == ["unwanted"]
    assert stopped_once("unwanted", proc) == ("cancel_requested", 1)
    assert (row("unwanted").state, row("unwanted").outcome) == ("stopped", "cancelled")
    proc.signal(signal.SIGTERM)
    assert proc.wait(20) == 0


def test_an_operators_force_stop_is_cancel_requested(make_worker_ready):
    WorkItem.objects.enqueue("test.why", "forced")
    proc = make_worker_ready("why-force", "--queue", "test.why")
    wait_until(lambda: started("forced"), timeout=20, message="the handler to start")
    WorkItem.objects.force_stop([row("forced").id])
    assert stopped_once("forced", proc) == ("cancel_requested", 1)
    proc.signal(signal.SIGTERM)
    assert proc.wait(20) == 0


def test_a_stall_is_stalled_not_a_cancel(make_worker_ready):
    WorkItem.objects.enqueue("test.why.stall", "silent")
    proc = make_worker_ready("why-stall", "--queue", "test.why.stall")
    assert stopped_once("silent", proc) == ("stalled", 0)
    assert row("silent").state == "active"  # left to lapse and be reclaimed, not settled
    proc.signal(signal.SIGTERM)
    assert proc.wait(20) == 0


def test_a_hard_timeout_is_timeout_not_a_cancel(make_worker_ready):
    WorkItem.objects.enqueue("test.why.timeout", "slow")
    proc = make_worker_ready("why-timeout", "--queue", "test.why.timeout")
    wait_until(lambda: started("slow"), timeout=20, message="the handler to start")
    WorkItem.objects.filter(key="slow").update(started_at=F("started_at") - dt.timedelta(seconds=5))
    assert reaper.fail_hard_timeouts() == 1
    assert stopped_once("slow", proc) == ("timeout", 0)
    assert (row("slow").state, row("slow").outcome) == ("stopped", "failed")
    proc.signal(signal.SIGTERM)
    assert proc.wait(20) == 0


def test_another_holder_taking_the_item_is_lease_lost_not_a_cancel(make_worker_ready):
    WorkItem.objects.enqueue("test.why", "taken")
    proc = make_worker_ready("why-lost", "--queue", "test.why")
    wait_until(lambda: started("taken"), timeout=20, message="the handler to start")
    first = row("taken")

    def steal() -> bool:
        # Its lease lapses (as if the worker were partitioned away) and another worker claims
        # it; the worker's keeper may renew in between, so try until the claim wins.
        WorkItem.objects.filter(pk=first.id, lease_token=first.lease_token).update(
            lease_expires_at="2000-01-01T00:00:00Z"
        )
        return bool(WorkItem.objects.claim(["test.why"], limit=1, lease=60, worker_id="thief").items)

    wait_until(steal, timeout=20, message="another worker to take the item")
    assert stopped_once("taken", proc) == ("lease_lost", 0)
    assert row("taken").claimed_by == "thief"
    proc.signal(signal.SIGTERM)
    assert proc.wait(20) == 0


def test_the_end_of_the_shutdown_grace_is_shutdown_not_a_cancel(make_worker_ready):
    WorkItem.objects.enqueue("test.why", "deploy")
    proc = make_worker_ready("why-shutdown", "--queue", "test.why", "--grace", "0.5")
    wait_until(lambda: started("deploy"), timeout=20, message="the handler to start")
    proc.signal(signal.SIGTERM)
    assert proc.wait(30) == 0, proc.output()[-3000:]
    assert why("deploy") == [("shutdown", 0)], proc.output()[-3000:]
    item = row("deploy")
    assert (item.state, item.attempts) == ("queued", 0)  # released, its attempt refunded


def test_the_first_reason_given_wins():
    WorkItem.objects.enqueue("test.why", "twice")
    (item,) = WorkItem.objects.claim(["test.why"], limit=1, worker_id="w").items
    hold = Hold(item, lease=60, stall=None)
    assert hold.reason is None and not hold.is_cancelled()
    hold.cancel(StopReason.SHUTDOWN)
    hold.lose(StopReason.LEASE_LOST)
    assert hold.cancelled.is_set() and hold.reason is StopReason.SHUTDOWN
    assert StopReason.SHUTDOWN == "shutdown"  # a str enum: compares with the plain value
