"""The worker's accounting under re-claims, stalls, lost connections and odd exceptions.

Each test reproduces a defect a review found in the in-process worker (issue 9 items 1, 3, 6
and 11; issue 10 item 4) with a real ``runworker`` process or a real Worker on its own threads
and connections.
"""

from __future__ import annotations

import logging
import signal
import threading
import time

import pytest
from django.db import connections

from tests.conftest import wait_until
from tests.testapp.models import Completion, Sample
from tests.workqueue.conftest import row
from workqueue import listener
from workqueue.models import WorkItem
from workqueue.worker import Worker, WorkerOptions
from workqueue.worker.lease import LeaseKeeper

pytestmark = pytest.mark.django_db(transaction=True)


# -- 1. a hold per claim, not per item id --------------------------------------------------


def test_a_run_re_claimed_by_the_same_worker_keeps_its_own_hold_and_both_runs_free_their_slots(make_worker_ready):
    WorkItem.objects.enqueue("test.reclaim", "twice")
    proc = make_worker_ready(
        "reclaimer", "--queue", "test.reclaim", "--concurrency", "2", "--max-items", "2", "--poll", "0.2"
    )
    wait_until(lambda: Sample.objects.filter(name="started:twice").exists(), timeout=20, message="attempt 1")
    # An operator's "requeue now" while attempt 1 is stuck: the same worker claims it again.
    assert len(WorkItem.objects.requeue_now([row("twice").id])) == 1
    wait_until(lambda: Completion.objects.filter(key="twice").exists(), timeout=20, message="attempt 2 to finish")
    # Attempt 1 comes back from its stuck call and returns. Its end must account for its own
    # claim: both runs are done, so --max-items 2 is reached and the worker exits.
    Sample.objects.create(name="release:twice", value=1)
    assert proc.wait(30) == 0, proc.output()[-3000:]
    (done,) = Completion.objects.filter(key="twice")
    assert (done.attempt, done.worker_id) == (2, "reclaimer")
    item = row("twice")
    assert (item.state, item.outcome, item.attempts) == ("stopped", "succeeded", 2)
    out = proc.output()
    assert "--max-items reached" in out
    assert "worker reclaimer stopped: 2 processed" in out, out[-3000:]


def test_the_keeper_tells_an_old_claim_from_a_new_claim_of_the_same_item():
    WorkItem.objects.enqueue("test.short", "k")
    (old,) = WorkItem.objects.claim(["test.short"], limit=1, worker_id="w1", lease=1.5).items
    keeper = LeaseKeeper(tick=0.05)
    try:
        old_hold = keeper.hold(old, lease=1.5)
        WorkItem.objects.requeue_now([old.id])
        (new,) = WorkItem.objects.claim(["test.short"], limit=1, worker_id="w1", lease=1.5).items
        assert new.id == old.id and new.lease_token != old.lease_token
        new_hold = keeper.hold(new, lease=1.5)
        assert old_hold.cancelled.wait(5), "the old claim was never told it lost the item"
        assert old_hold.reason == "lease_lost"
        assert keeper.holds() == [new_hold]
        first_expiry = new.lease_expires_at
        wait_until(lambda: row("k").lease_expires_at > first_expiry, timeout=5, message="the new claim's renewal")
        assert not new_hold.is_cancelled() and row("k").lease_token == new.lease_token
    finally:
        keeper.close()


@pytest.mark.parametrize("new_first", [False, True])
def test_a_batch_holding_an_old_and_a_new_claim_of_one_item_settles_only_the_new_one(new_first):
    WorkItem.objects.enqueue("test.short", "k")
    (old,) = WorkItem.objects.claim(["test.short"], limit=1, worker_id="w1").items
    WorkItem.objects.requeue_now([old.id])
    (new,) = WorkItem.objects.claim(["test.short"], limit=1, worker_id="w1").items
    settled, lost = WorkItem.objects.complete_many([new, old] if new_first else [old, new])
    assert settled == [new] and lost == [old]
    assert (row("k").state, row("k").outcome) == ("stopped", "succeeded")


# -- 3. the stall clock starts when the handler starts -------------------------------------


def test_items_waiting_in_the_local_run_queue_are_not_stall_cancelled_before_they_start(make_worker_ready):
    # test.stall: stall budget 1 s. One runner, four items claimed at once, each running
    # 0.6 s with progress: the last one waits 1.8 s in the worker before its handler starts.
    keys = [f"wait{i}" for i in range(4)]
    WorkItem.objects.enqueue_many([{"queue": "test.stall", "key": k, "metadata": {"seconds": "0.6"}} for k in keys])
    proc = make_worker_ready("patient", "--queue", "test.stall", "--concurrency", "1", "--batch", "4")
    wait_until(lambda: WorkItem.objects.filter(key__in=keys).succeeded().count() == 4, timeout=60, message="all four")
    assert sorted(Completion.objects.values_list("key", "attempt")) == [(k, 1) for k in keys]
    assert not Sample.objects.filter(name__startswith="cancelled:").exists()
    assert "stalled" not in proc.output()
    assert "went while it waited" not in proc.output()
    proc.signal(signal.SIGTERM)
    assert proc.wait(20) == 0


def test_a_hold_taken_before_its_work_starts_stalls_only_after_the_first_progress():
    WorkItem.objects.enqueue_many([("test.short", "waiting")])
    (item,) = WorkItem.objects.claim(["test.short"], limit=1, worker_id="w1", lease=1.5).items
    keeper = LeaseKeeper(tick=0.05)
    try:
        (hold,) = keeper.hold_many([item], lease=1.5, stall=0.3, started=False)
        time.sleep(1.0)  # three stall budgets without progress, but the work has not started
        assert not hold.is_cancelled() and keeper.holds() == [hold] and keeper.stalled == 0
        assert keeper.renewals >= 1 and row("waiting").lease_token == item.lease_token
        hold.progress()  # the handler starts: from now on the budget counts
        assert hold.cancelled.wait(3) and hold.reason == "stalled"
    finally:
        keeper.close()


# -- 6. connection losses are refunded a bounded number of times in a row ---------------


def test_a_handler_that_kills_its_own_connection_is_charged_after_the_refunded_losses_in_a_row(make_worker_ready):
    # CONNECTION_LOSS_REFUNDS is 3 (the default): three losses in a row go back refunded, every
    # later one in the row costs an attempt, so with max_attempts 2 it ends after 3 + 2 runs.
    WorkItem.objects.enqueue("test.suicide", "doomed")
    proc = make_worker_ready("suicidal", "--queue", "test.suicide", "--poll", "0.2")
    wait_until(lambda: row("doomed").state == "stopped", timeout=60, message="the item to be failed")
    item = row("doomed")
    assert (item.outcome, item.attempts) == ("failed", 2)
    assert item.last_error.startswith("database connection lost while running (5 in a row; the attempt is charged)")
    assert Sample.objects.filter(name="run:doomed").count() == 5
    runs = list(Sample.objects.filter(name="run:doomed").order_by("id").values_list("value", flat=True))
    assert runs == [1, 1, 1, 1, 2]  # the attempt each run saw: refunded three times, then charged
    assert proc.alive()
    out = proc.output()
    assert out.count("released without charging the attempt") == 3, out[-3000:]
    proc.signal(signal.SIGTERM)
    assert proc.wait(20) == 0


# -- 11. no false "lost its lease" after a settlement --------------------------------------


def test_a_handler_that_settles_itself_and_works_on_logs_no_false_lease_loss(make_worker_ready):
    # test.selfsettle: lease 1.5 s (renewed every 0.5 s); it completes, then works 1.2 s more.
    keys = [f"s{i}" for i in range(4)]
    WorkItem.objects.enqueue_many([("test.selfsettle", k) for k in keys])
    proc = make_worker_ready("settler", "--queue", "test.selfsettle", "--concurrency", "4", "--max-items", "4")
    assert proc.wait(30) == 0, proc.output()[-3000:]
    assert WorkItem.objects.filter(key__in=keys).succeeded().count() == 4
    out = proc.output()
    assert "lost its lease" not in out, out[-3000:]
    assert "4 processed (0 failed, 0 leases lost)" in out, out[-3000:]


def test_items_the_settler_settles_are_never_reported_as_lost_leases(caplog):
    # test.settled: lease 1.5 s, handlers return at once and the settler settles them. The
    # settler's dropping of each hold after the settlement is slowed past the keeper's next
    # renewal, which must not mistake the settlement for a lost lease.
    keys = [f"b{i}" for i in range(4)]
    WorkItem.objects.enqueue_many([("test.settled", k) for k in keys])
    worker = Worker(
        WorkerOptions(
            queues=["test.settled"], concurrency=3, batch=4, poll=0.2, worker_id="late", install_signals=False
        )
    )
    drop, drop_many = worker.keeper.drop, worker.keeper.drop_many

    def late(dropping):
        def slowly(holds):
            if threading.current_thread().name == "workqueue-settler":
                time.sleep(1.2)  # longer than a renewal interval (0.5 s) plus the keeper's tick
            dropping(holds)

        return slowly

    # The settler drops a settled batch's holds with drop_many (one hold at a time: drop).
    worker.keeper.drop, worker.keeper.drop_many = late(drop), late(drop_many)

    def run():
        try:
            worker.run()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, daemon=True)
    with caplog.at_level(logging.INFO, logger="workqueue"):
        thread.start()
        try:
            wait_until(lambda: worker.processed == 4, timeout=60, message="the four items to be settled")
        finally:
            worker.request_stop()
            thread.join(60)
            listener.shared().stop()  # the in-process worker started it; let the database go
    assert not thread.is_alive()
    assert WorkItem.objects.filter(key__in=keys).succeeded().count() == 4
    assert worker.keeper.renewals >= 1, "no renewal ran while the holds were being dropped"
    assert "lost its lease" not in caplog.text
    assert worker.lost == 0 and worker.keeper.lost == 0


# -- issue 10 item 4: a BaseException from a handler fails its item, never a runner -----------


def test_a_keyboard_interrupt_in_a_handler_fails_its_item_and_the_only_runner_goes_on(make_worker_ready):
    WorkItem.objects.enqueue("test.interrupt", "ctrl-c")
    proc = make_worker_ready(
        "lone", "--queue", "test.interrupt", "--queue", "test.record", "--concurrency", "1", "--poll", "0.2"
    )
    wait_until(lambda: row("ctrl-c").state == "stopped", timeout=20, message="the interrupted item to be failed")
    bad = row("ctrl-c")
    assert (bad.outcome, bad.attempts) == ("failed", 1)
    assert bad.last_error.startswith("builtins.KeyboardInterrupt: test.interrupt ctrl-c"), bad.last_error
    WorkItem.objects.enqueue("test.record", "after")
    wait_until(lambda: Completion.objects.filter(key="after").exists(), timeout=20, message="the next item to run")
    assert proc.alive()
    proc.signal(signal.SIGTERM)
    assert proc.wait(20) == 0, proc.output()[-3000:]
    assert "handler raised KeyboardInterrupt" in proc.output()


@pytest.mark.django_db
def test_the_migration_carries_the_count_in_last_error_over_to_the_column():
    """0009 moved the losses in a row out of last_error's text: an unsettled item between two
    lost connections keeps its count; a settled one and any other error are left alone."""
    import importlib

    from django.db import connection

    carry_over = importlib.import_module("workqueue.migrations.0009_connection_losses").CARRY_OVER
    text = "database connection lost while running (2 in a row; released without charging the attempt): x"
    WorkItem.objects.enqueue_many([("test.noop", "between"), ("test.noop", "other"), ("test.noop", "done")])
    WorkItem.objects.filter(key="between").update(last_error=text)
    WorkItem.objects.filter(key="other").update(last_error="builtins.ValueError: boom")
    WorkItem.objects.filter(key="done").update(last_error=text, state="stopped", outcome="failed")
    with connection.cursor() as cur:
        cur.execute(carry_over)
    got = dict(WorkItem.objects.values_list("key", "connection_losses"))
    assert got == {"between": 2, "other": 0, "done": 0}
