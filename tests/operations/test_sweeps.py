"""``recover`` re-offers stranded operations exactly once; ``reap`` deletes only old terminal
ones. Both as library calls (pinned clocks, concurrent threads) and as ``manage.py`` commands."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.db import transaction
from django.db.models import F
from django.test import override_settings
from django.utils import timezone

import operations
from operations import service
from operations.models import Operation
from tests.operations.conftest import items_for, op_row, run_next
from tests.workqueue.conftest import run_threads
from workqueue.models import WorkItem
from workqueue.sweeps import run_sweep

pytestmark = pytest.mark.django_db

LATER = "2999-01-01T00:00:00Z"  # a pinned "now" far past every grace period


def long_ago() -> dt.datetime:
    """A day before now: past every test's RECOVER_AFTER, inside every retention."""
    return timezone.now() - dt.timedelta(days=1)


def stranded(kind: str = "test.ops.count", **fields) -> Operation:
    """An operation whose work item was lost (as if the process died between the two writes)."""
    op = operations.start(kind, {})
    WorkItem.objects.filter(key=op.id).delete()
    Operation.objects.filter(pk=op.id).update(updated_at=long_ago(), **fields)
    return op_row(op.id)


def live_items(op_id: str):
    return items_for(op_id).live()


def test_recover_re_offers_a_stranded_pending_operation_once():
    op = stranded()
    assert service.recover() == {"reoffered": 1}
    (item,) = live_items(op.id)
    assert (item.queue, item.state, item.attempts, item.max_attempts) == ("operations", "queued", 0, 5)
    assert service.recover(now=LATER) == {"reoffered": 0}  # it has a live item now
    assert live_items(op.id).count() == 1


def test_a_dry_run_recover_or_reap_counts_what_it_would_do_and_changes_nothing():
    op = stranded()
    old = finished("succeeded", 31)
    assert service.recover(dry_run=True) == {"reoffered": 1}
    assert live_items(op.id).count() == 0
    assert service.reap(dry_run=True) == {"deleted": 1}
    assert Operation.objects.filter(pk=old.id).exists()
    with transaction.atomic():  # inside a caller's transaction, only the dry run is undone
        Operation.objects.filter(pk=op.id).update(priority=7)
        assert service.recover(dry_run=True) == {"reoffered": 1}
    assert op_row(op.id).priority == 7 and live_items(op.id).count() == 0
    assert service.recover() == {"reoffered": 1} and service.reap() == {"deleted": 1}


def test_recover_waits_out_the_grace_before_calling_an_operation_stranded():
    op = operations.start("test.ops.count", {})
    WorkItem.objects.filter(key=op.id).delete()
    assert service.recover() == {"reoffered": 0}  # pending for less than RECOVER_AFTER
    assert service.recover(now=LATER) == {"reoffered": 1}


def test_recover_leaves_pending_operations_with_a_live_item_alone():
    op = operations.start("test.ops.count", {}, delay=3600)  # e.g. waiting for a retry
    Operation.objects.filter(pk=op.id).update(updated_at=long_ago())
    assert service.recover(now=LATER) == {"reoffered": 0}
    assert items_for(op.id).count() == 1


@pytest.mark.parametrize("state", ["succeeded", "failed", "cancelled"])
def test_recover_never_revives_a_settled_operation(state):
    op = stranded(state=state, finished_at=long_ago())
    assert service.recover(now=LATER) == {"reoffered": 0}
    assert not items_for(op.id).exists()
    assert op_row(op.id).state == state


def test_recover_carries_the_attempt_count_and_priority_onto_the_new_item():
    op = operations.start("test.ops.fail", {}, priority=7)
    WorkItem.objects.filter(key=op.id).delete()
    Operation.objects.filter(pk=op.id).update(updated_at=long_ago(), attempts=2)
    assert service.recover() == {"reoffered": 1}
    item = live_items(op.id).get()
    assert (item.attempts, item.max_attempts, item.priority) == (2, 3, 7)


@pytest.mark.django_db(transaction=True)
def test_recover_re_offers_a_running_operation_whose_lease_lapsed_with_no_item_and_it_runs_again():
    op = stranded("test.ops.count", state="running", attempts=1, claimed_until=long_ago(), started_at=long_ago())
    assert service.recover() == {"reoffered": 1}
    run_next()
    done = op_row(op.id)
    assert (done.state, done.attempts) == ("succeeded", 2)


def test_recover_leaves_a_running_operation_whose_lease_is_live_alone():
    op = stranded(state="running", attempts=1, claimed_until=timezone.now() + dt.timedelta(hours=1))
    assert service.recover() == {"reoffered": 0}
    assert not items_for(op.id).exists()


@pytest.mark.django_db(transaction=True)
def test_recover_run_concurrently_on_separate_connections_re_offers_exactly_once():
    ops = [stranded() for _ in range(5)]
    results = run_threads(lambda i: service.recover(now=LATER)["reoffered"], 6)
    assert sum(results) == 5
    for op in ops:
        assert live_items(op.id).count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_recover_sweep_concurrently_re_offers_exactly_once_and_says_so():
    op = stranded()
    results = run_threads(lambda i: run_sweep("recover"), 4)
    ran = [r for r in results if not r.skipped]
    assert sum(r.counts["operations_reoffered"] for r in ran) == 1
    assert all("operations_reoffered" in r.counts for r in ran)
    assert live_items(op.id).count() == 1


@pytest.mark.django_db(transaction=True)
def test_manage_py_recover_run_concurrently_re_offers_exactly_once(spawn_command):
    op = stranded()
    settled = stranded(state="succeeded", finished_at=long_ago())
    procs = [spawn_command("recover", "--json") for _ in range(2)]
    summaries = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        summaries.append(json.loads(out))
    assert sum(s["counts"].get("operations_reoffered", 0) for s in summaries if not s["skipped"]) == 1
    assert live_items(op.id).count() == 1
    assert not items_for(settled.id).exists()


@pytest.mark.django_db(transaction=True)
def test_manage_py_recover_prints_its_count_in_the_summary_line(run_command):
    stranded()
    done = run_command("recover")
    assert done.returncode == 0, done.stderr
    assert "operations_reoffered=1" in done.stdout.strip().splitlines()[-1]


def finished(state: str, days_ago: float) -> Operation:
    op = operations.start("test.ops.count", {})
    Operation.objects.filter(pk=op.id).update(
        state=state, finished_at=timezone.now() - dt.timedelta(days=days_ago), updated_at=F("created_at")
    )
    return op


def test_reap_deletes_only_terminal_operations_past_retention():
    old = [finished(state, 31) for state in ("succeeded", "failed", "cancelled")]
    recent = finished("succeeded", 29)
    pending = operations.start("test.ops.count", {})
    running = operations.start("test.ops.count", {})
    Operation.objects.filter(pk__in=[pending.id, running.id]).update(created_at=timezone.now() - dt.timedelta(days=90))
    Operation.objects.filter(pk=running.id).update(state="running", finished_at=timezone.now() - dt.timedelta(days=90))
    assert service.reap() == {"deleted": 3}
    remaining = set(Operation.objects.values_list("pk", flat=True))
    assert remaining == {recent.id, pending.id, running.id}
    assert not remaining & {op.id for op in old}
    assert service.reap() == {"deleted": 0}


def test_reap_works_in_batches():
    for _ in range(5):
        finished("succeeded", 40)
    with override_settings(OPERATIONS={"LEASE": 3, "PROGRESS_INTERVAL": 0.5, "REAP_BATCH": 2}):
        assert service.reap() == {"deleted": 2}
        assert service.reap() == {"deleted": 2}
        assert service.reap() == {"deleted": 1}


def test_reap_with_a_pinned_clock():
    finished("failed", 1)
    assert service.reap() == {"deleted": 0}
    assert service.reap(now="2999-01-01T00:00:00Z") == {"deleted": 1}


@pytest.mark.django_db(transaction=True)
def test_manage_py_reap_deletes_and_prints_its_count(run_command):
    finished("succeeded", 31)
    finished("succeeded", 31)
    keep = finished("succeeded", 1)
    done = run_command("reap")
    assert done.returncode == 0, done.stderr
    assert "operations_deleted=2" in done.stdout.strip().splitlines()[-1]
    assert list(Operation.objects.values_list("pk", flat=True)) == [keep.id]
