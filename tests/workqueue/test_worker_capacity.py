"""Every way a run ends gives its slot back: a worker's capacity never leaks.

A claim takes a slot of the worker's capacity (its ledger's ``inflight``) and the run's ending
must give it back, whichever ending it is, or the worker claims less and less and finally
nothing. At a high concurrency one leaked slot hides behind the others (issue 35 item 1: a
stall-cancelled run kept its slot and no test failed), so these tests run one runner and
claim one item at a time, and after each ending read the ledger itself: nothing in flight,
nothing running, each lane's room back to its full value, nothing left for the lease keeper.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import pytest
from django.db import connections

from tests.conftest import wait_until
from tests.testapp.models import Completion, Sample
from tests.workqueue.conftest import row
from workqueue import listener
from workqueue.models import WorkItem
from workqueue.sweeps import reap as reaper
from workqueue.worker import Worker, WorkerOptions

pytestmark = pytest.mark.django_db(transaction=True)


# -- a runworker process ---------------------------------------------------------------------


def test_runs_cancelled_by_a_stall_give_their_slot_back_so_a_one_runner_worker_goes_on(make_worker_ready):
    # Both stall on attempt 1 (no progress for the queue's 1 s budget) and succeed on attempt 2,
    # once their lease has lapsed. Two leaked slots would leave a --concurrency 1 --batch 1
    # worker (room for two) claiming nothing more: not the reclaims, not the item after them.
    stalling = {"seconds": "2", "progress": "reclaimed"}
    WorkItem.objects.enqueue_many([{"queue": "test.stall", "key": k, "metadata": stalling} for k in ("s1", "s2")])
    WorkItem.objects.enqueue("test.record", "after")
    proc = make_worker_ready(
        "narrow", "--queue", "test.stall", "--queue", "test.record", "--concurrency", "1", "--batch", "1"
    )
    wait_until(
        lambda: WorkItem.objects.filter(key__in=["s1", "s2", "after"]).succeeded().count() == 3 or not proc.alive(),
        timeout=60,
        message="both stalled items and the one after them to succeed",
    )
    assert Sample.objects.filter(name__in=["cancelled:s1", "cancelled:s2"]).count() == 2
    assert sorted(Completion.objects.values_list("key", "attempt")) == [("after", 1), ("s1", 2), ("s2", 2)]
    proc.signal(15)
    assert proc.wait(30) == 0, proc.output()[-3000:]
    # Two stopped runs (counted failed: they did not finish) and three successes.
    assert "worker narrow stopped: 5 processed (2 failed, 0 leases lost)" in proc.output(), proc.output()[-3000:]


# -- an in-process worker, its ledger read after each ending -----------------------------------


@contextmanager
def worker_running(*queues: str, **options):
    """A Worker (one runner, batches of one) on its own thread; stopped on the way out."""
    options = {"concurrency": 1, "batch": 1, "poll": 0.2, "install_signals": False, **options}
    worker = Worker(WorkerOptions(queues=list(queues), worker_id="capacity", **options))

    def run():
        try:
            worker.run()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.request_stop()
        thread.join(60)
        listener.shared().stop()  # the in-process worker started it; let the database go
    assert not thread.is_alive()


def assert_full_capacity(worker: Worker) -> None:
    """Every claim accounted for: the ledger is back where an idle worker starts."""
    ledger = worker.ledger
    wait_until(lambda: ledger.inflight == 0, timeout=15, message="the worker to account for every run it claimed")
    assert (ledger.inflight, ledger.on_loop, ledger.running()) == (0, 0, [])
    assert ledger.free() == ledger.threads.capacity  # the runner threads' pool
    assert ledger.free(ledger.loop) == ledger.loop.capacity  # the event loop's pool
    assert worker.keeper.holds() == []


def settled(key: str, outcome: str, attempts: int | None = None) -> bool:
    it = WorkItem.objects.filter(key=key, state="stopped", outcome=outcome).first()
    return it is not None and (attempts is None or it.attempts == attempts)


def started(key: str) -> bool:
    return Sample.objects.filter(name=f"started:{key}").exists()


def cancelled(key: str) -> bool:
    return Sample.objects.filter(name=f"cancelled:{key}").exists()


def until(predicate, message: str) -> None:
    wait_until(predicate, timeout=60, interval=0.1, message=message)


def take_the_lease_away(key: str) -> None:
    """An operator's "requeue now": the holder's proof is gone, its next renewal says so."""
    assert len(WorkItem.objects.requeue_now([row(key).id])) == 1


def endings_item(end: str, key: str = "k", **fields) -> None:
    WorkItem.objects.enqueue("test.endings", key, metadata={"end": end}, **fields)


# Each ending: the queues the worker serves, what to enqueue before it starts, and what to do
# while it runs until the ending has happened (and the item has come to rest).


def _retried(worker: Worker) -> None:
    def retried():
        it = row("k")
        return (it.state, it.attempts) == ("queued", 1) and it.run_after is not None and it.last_error is not None

    until(retried, "the item to be retried in an hour")


def _lease_lost_while_running(worker: Worker) -> None:
    until(lambda: started("k"), "attempt 1 to start")
    take_the_lease_away("k")
    until(lambda: cancelled("k") and settled("k", "succeeded", attempts=2), "attempt 1 cancelled, attempt 2 done")


def _hard_timeout(worker: Worker) -> None:
    until(lambda: started("k"), "the run to start")
    # test.timeout: a hard timeout of 1 s from the attempt's start; the reaper fails it and
    # clears the proof, and the holder's next renewal cancels the run.
    until(lambda: reaper.fail_hard_timeouts() == 1, "the reaper to time the run out")
    until(lambda: cancelled("k") and settled("k", "failed"), "the timed-out run to stop")


def _lost_before_it_started(worker: Worker) -> None:
    # One runner: "first" holds it while "second" waits in the worker's run queue. Second's
    # lease is taken away there, then first's, so the runner meets a hold that was lost
    # before it began.
    until(lambda: started("first"), "first to start")
    take_the_lease_away("second")
    until(lambda: worker.keeper.lost >= 1, "the lease keeper to see second's lease gone")
    take_the_lease_away("first")
    until(lambda: settled("first", "succeeded") and settled("second", "succeeded"), "both to run again and succeed")


def _cancelled_on_the_event_loop(worker: Worker) -> None:
    until(lambda: started("k"), "attempt 1 to start on the event loop")
    take_the_lease_away("k")  # attempt 1 awaits until cancelled: CancelledError at an await
    until(lambda: settled("k", "succeeded", attempts=2), "attempt 2 to succeed")


ENDINGS = {
    "returned": (
        ["test.endings"],
        lambda: endings_item("return"),
        lambda w: until(lambda: settled("k", "succeeded"), "the batched completion"),
    ),
    "settled-by-its-handler": (
        ["test.endings"],
        lambda: endings_item("complete"),
        lambda w: until(lambda: settled("k", "succeeded"), "the handler's own completion"),
    ),
    "failed": (
        ["test.endings"],
        lambda: endings_item("raise", max_attempts=1),
        lambda w: until(lambda: settled("k", "failed", attempts=1), "the failure"),
    ),
    "retried": (["test.endings"], lambda: endings_item("retry"), _retried),
    "failed-permanently": (
        ["test.endings"],
        lambda: endings_item("permanent"),
        lambda w: until(lambda: settled("k", "failed", attempts=1), "the permanent failure"),
    ),
    # Requeued by its first run, run again (new work: attempts start over) and returned.
    "requeued": (
        ["test.endings"],
        lambda: endings_item("requeue"),
        lambda w: until(
            lambda: Sample.objects.filter(name="requeued:k").exists() and settled("k", "succeeded", attempts=1),
            "the requeue and the run after it",
        ),
    ),
    "lease-lost-at-its-own-settle": (
        ["test.endings"],
        lambda: endings_item("leaselost"),
        lambda w: until(lambda: settled("k", "succeeded", attempts=2), "attempt 1's LeaseLost and attempt 2"),
    ),
    "proof-gone-when-the-batch-settles": (
        ["test.endings"],
        lambda: endings_item("stale"),
        lambda w: until(lambda: settled("k", "succeeded", attempts=2), "attempt 1's stale settle and attempt 2"),
    ),
    "lease-lost-while-running": (["test.endings"], lambda: endings_item("hold"), _lease_lost_while_running),
    "stalled": (
        ["test.stall"],
        lambda: WorkItem.objects.enqueue("test.stall", "k", metadata={"seconds": "2", "progress": "reclaimed"}),
        lambda w: until(lambda: cancelled("k") and settled("k", "succeeded", attempts=2), "the stall and the reclaim"),
    ),
    "hard-timeout": (
        ["test.timeout"],
        lambda: WorkItem.objects.enqueue("test.timeout", "k", metadata={"seconds": "30"}),
        _hard_timeout,
    ),
    "lost-before-it-started": (
        ["test.endings"],
        lambda: WorkItem.objects.enqueue_many(
            [
                {"queue": "test.endings", "key": "first", "metadata": {"end": "hold"}},
                {"queue": "test.endings", "key": "second", "metadata": {"end": "return"}},
            ]
        ),
        _lost_before_it_started,
    ),
    # test.suicide terminates its own backend: released with the attempt refunded, then
    # charged once the refunds in a row are spent, until it fails.
    "its-connection-killed": (
        ["test.suicide"],
        lambda: WorkItem.objects.enqueue("test.suicide", "k"),
        lambda w: until(lambda: settled("k", "failed"), "the item to fail after its connection losses"),
    ),
    "handed-to-the-event-loop": (
        ["test.endings"],
        lambda: endings_item("handoff"),
        lambda w: until(lambda: settled("k", "succeeded"), "the coroutine's completion"),
    ),
    "cancelled-on-the-event-loop": (
        ["test.async.holdonce"],
        lambda: WorkItem.objects.enqueue("test.async.holdonce", "k"),
        _cancelled_on_the_event_loop,
    ),
}


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_every_ending_gives_the_runs_slot_back(ending):
    queues, enqueue, drive = ENDINGS[ending]
    enqueue()
    with worker_running(*queues) as worker:
        drive(worker)
        assert_full_capacity(worker)


def test_a_shutdown_gives_back_the_slots_of_what_it_released_and_of_what_never_started():
    # One runner: "running" holds it past the grace period (released, then cancelled), and
    # "waiting" was claimed with it and never started (given back).
    WorkItem.objects.enqueue_many(
        [
            {"queue": "test.endings", "key": "running", "metadata": {"end": "hold"}},
            {"queue": "test.endings", "key": "waiting", "metadata": {"end": "return"}},
        ]
    )
    with worker_running("test.endings", grace=0.3) as worker:
        wait_until(lambda: started("running") and worker.ledger.inflight == 2, timeout=30, message="both claimed")
    assert Sample.objects.filter(name="cancelled:running").exists()
    for key in ("running", "waiting"):
        it = row(key)
        assert (it.state, it.attempts, it.lease_token) == ("queued", 0, None), key
    assert_full_capacity(worker)
    assert worker.processed == 1  # the released run stopped; the never-started one is not counted
