"""``async def`` handlers in a real ``runworker`` process: concurrency on the event loop, crashes,
signals, stalls, and sync and async queues served by one process."""

from __future__ import annotations

import signal
import threading

import pytest
from django.db import connections

from tests.conftest import wait_until
from tests.testapp.models import Completion, Sample
from tests.workqueue.conftest import row
from workqueue import handlers
from workqueue.models import WorkItem

pytestmark = pytest.mark.django_db(transaction=True)


def started(key: str) -> bool:
    return Sample.objects.filter(name=f"started:{key}").exists()


class PeakSampler:
    """Count a queue's active items from the database every 20 ms on a thread; keep the peak."""

    def __init__(self, queue: str):
        self.queue = queue
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-sampler", daemon=True)

    def _run(self) -> None:
        try:
            while not self._stop.wait(0.02):
                running = WorkItem.objects.filter(queue=self.queue, state="active").count()
                self.peak = max(self.peak, running)
                self.samples += 1
        finally:
            connections.close_all()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)


def test_the_registry_tells_async_handlers_from_sync_ones():
    assert handlers.get("demo.async_sleep").is_async
    assert handlers.get("test.async.short").is_async
    assert not handlers.get("demo.sleep").is_async
    assert not handlers.get("operations").is_async  # its async kinds hand their runs to the loop


def test_200_async_sleeps_run_far_more_at_once_than_the_threads_and_each_runs_once(start_ready_worker):
    keys = [f"s{i}" for i in range(200)]
    WorkItem.objects.enqueue_many([{"queue": "demo.async_sleep", "key": k, "metadata": {"seconds": "1"}} for k in keys])
    with PeakSampler("demo.async_sleep") as sampler:
        proc = start_ready_worker(
            "loop", "--queue", "demo.async_sleep", "--async-concurrency", "100", "--concurrency", "4"
        )
        wait_until(
            lambda: not WorkItem.objects.filter(queue="demo.async_sleep").unsettled().exists(),
            timeout=120,
            message="all 200 items to be settled",
        )
    items = WorkItem.objects.filter(queue="demo.async_sleep")
    assert items.count() == 200
    # Exactly once: each succeeded on its first and only claim (attempts are charged at claim).
    assert set(items.values_list("outcome", "attempts")) == {("succeeded", 1)}
    assert sampler.samples > 10
    print(f"peak running at once: {sampler.peak} (threads: 4, async concurrency: 100)")
    assert sampler.peak >= 40, f"peak {sampler.peak}: the loop should run far more than 4 at once"
    assert sampler.peak <= 100, "never more than --async-concurrency at once"
    proc.signal(signal.SIGTERM)
    assert proc.wait(20) == 0, proc.output()[-3000:]


def test_an_async_handler_sigkilled_mid_run_is_reclaimed_by_another_worker(start_ready_worker):
    WorkItem.objects.enqueue("test.async.holdonce", "victim")
    doomed = start_ready_worker("doomed-async", "--queue", "test.async.holdonce")
    wait_until(lambda: started("victim"), timeout=20, message="the coroutine to start")
    assert row("victim").claimed_by == "doomed-async"
    doomed.kill()
    heir = start_ready_worker("heir-async", "--queue", "test.async.holdonce")
    wait_until(lambda: Completion.objects.filter(key="victim").exists(), timeout=30, message="the reclaim")
    (done,) = Completion.objects.filter(key="victim")
    assert (done.worker_id, done.attempt, done.reclaimed) == ("heir-async", 2, True)
    item = row("victim")
    assert (item.state, item.outcome, item.attempts) == ("stopped", "succeeded", 2)
    heir.signal(signal.SIGTERM)
    assert heir.wait(20) == 0, heir.output()[-3000:]


def test_sigterm_lets_running_coroutines_finish_within_the_grace_and_releases_the_rest(start_ready_worker):
    proc = start_ready_worker("graceful-async", "--queue", "test.async.short", "--grace", "4")
    WorkItem.objects.enqueue("test.async.short", "short", metadata={"seconds": "1.5"})
    WorkItem.objects.enqueue("test.async.short", "long", metadata={"seconds": "120"})
    wait_until(lambda: started("short") and started("long"), timeout=20, message="both coroutines to start")
    proc.signal(signal.SIGTERM)
    assert proc.wait(30) == 0, proc.output()[-3000:]
    short, long = row("short"), row("long")
    assert (short.state, short.outcome, short.attempts) == ("stopped", "succeeded", 1)
    assert Completion.objects.filter(key="short").count() == 1
    # The long one was released (its attempt refunded) and told to stop at its next await.
    assert (long.state, long.attempts, long.lease_token) == ("queued", 0, None)
    assert not Completion.objects.filter(key="long").exists()
    assert Sample.objects.filter(name="cancelled:long").exists()
    out = proc.output()
    assert "SIGTERM received" in out and "releasing 1 running item" in out, out[-3000:]


def test_a_coroutine_that_blocks_past_its_stall_budget_is_cancelled_at_its_next_await_and_others_go_on(
    start_ready_worker,
):
    others = [f"other{i}" for i in range(6)]
    WorkItem.objects.enqueue_many(
        [{"queue": "test.async.short", "key": k, "metadata": {"seconds": "4"}} for k in others]
    )
    proc = start_ready_worker("blocked", "--queue", "test.async.short", "--queue", "test.async.block")
    wait_until(lambda: all(started(k) for k in others), timeout=20, message="the other coroutines to start")
    WorkItem.objects.enqueue("test.async.block", "hog", metadata={"block": "3"})
    wait_until(lambda: Sample.objects.filter(name="cancelled:hog").exists(), timeout=30, message="the cancel")
    # Cancelled at its await after the stall, not failed: its lease lapses and it is run again.
    wait_until(lambda: Completion.objects.filter(key="hog").exists(), timeout=30, message="the hog's reclaim")
    (done,) = Completion.objects.filter(key="hog")
    assert (done.attempt, done.reclaimed) == (2, True)
    assert row("hog").outcome == "succeeded"
    assert "stalled" in proc.output()
    # The loop's other coroutines were held up while it blocked, but none was cancelled: all finish.
    wait_until(lambda: Completion.objects.filter(key__in=others).count() == 6, timeout=30, message="the others")
    assert not Sample.objects.filter(name__in=[f"cancelled:{k}" for k in others]).exists()
    assert set(WorkItem.objects.filter(key__in=others).values_list("outcome", "attempts")) == {("succeeded", 1)}
    proc.signal(signal.SIGTERM)
    assert proc.wait(20) == 0, proc.output()[-3000:]


def test_one_process_runs_sync_and_async_queues_and_a_busy_sync_handler_never_blocks_the_loop(start_ready_worker):
    # test.capped (sync, a thread) holds until the test writes Sample "go".
    WorkItem.objects.enqueue("test.capped", "sync-one", metadata={"until": "go", "seconds": "0"})
    proc = start_ready_worker("both", "--queue", "test.capped", "--queue", "test.async.short", "--concurrency", "1")
    wait_until(lambda: Sample.objects.filter(name="capped_held").exists(), timeout=20, message="the sync run")
    keys = [f"a{i}" for i in range(5)]
    WorkItem.objects.enqueue_many(
        [{"queue": "test.async.short", "key": k, "metadata": {"seconds": "0.2"}} for k in keys]
    )
    # The only thread is busy with the sync handler, yet every async item runs to the end.
    wait_until(lambda: Completion.objects.filter(key__in=keys).count() == 5, timeout=30, message="the async items")
    assert not Completion.objects.filter(key="sync-one").exists()
    assert row("sync-one").state == "active"
    Sample.objects.create(name="go", value=1)
    wait_until(lambda: Completion.objects.filter(key="sync-one").exists(), timeout=20, message="the sync item")
    assert WorkItem.objects.filter(key__in=[*keys, "sync-one"]).succeeded().count() == 6
    proc.signal(signal.SIGTERM)
    assert proc.wait(20) == 0, proc.output()[-3000:]


def test_the_orm_from_async_handlers_gets_a_session_per_handler_not_one_for_all(start_ready_worker):
    keys = [f"orm{i}" for i in range(5)]
    WorkItem.objects.enqueue_many([{"queue": "test.async.orm", "key": k, "metadata": {"seconds": "1"}} for k in keys])
    proc = start_ready_worker("orm", "--queue", "test.async.orm")
    wait_until(
        lambda: WorkItem.objects.filter(key__in=keys).succeeded().count() == 5, timeout=60, message="the 5 items"
    )
    first = dict(Sample.objects.filter(name__startswith="orm1:").values_list("name", "value"))
    second = dict(Sample.objects.filter(name__startswith="orm2:").values_list("name", "value"))
    # Each handler's thread-sensitive calls share one thread, so one session (a transaction
    # could span them); the handlers, running at once, each have their own: not one for all.
    assert [first[f"orm1:{k}"] for k in keys] == [second[f"orm2:{k}"] for k in keys]
    assert len(set(first.values())) == 5
    proc.signal(signal.SIGTERM)
    assert proc.wait(20) == 0, proc.output()[-3000:]
