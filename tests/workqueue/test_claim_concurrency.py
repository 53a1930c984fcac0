"""Many claimers at once: worker processes and threads on their own connections."""

from __future__ import annotations

import datetime as dt
import signal
import threading
import time
from collections import Counter

import pytest
from django.db import connections, transaction
from django.db.models import Count, Max
from django.db.models.functions import Now

from tests.conftest import wait_until
from tests.testapp.models import Completion, Sample
from workqueue.models import WorkItem

pytestmark = pytest.mark.django_db(transaction=True)


def thread_claimer(name: str, stop: threading.Event, queue: str = "test.record") -> None:
    """Claim and settle like a worker would, recording a Completion per settled item."""
    try:
        while not stop.is_set():
            items = WorkItem.objects.claim([queue], limit=5, worker_id=name).items
            if not items:
                time.sleep(0.01)
                continue
            with transaction.atomic():
                settled, _lost = WorkItem.objects.complete_many(items)
                Completion.objects.bulk_create(
                    Completion(queue=i.queue, key=i.key, worker_id=name, attempt=i.attempts, reclaimed=i.reclaimed)
                    for i in settled
                )
    finally:
        connections.close_all()


def test_four_workers_and_two_claiming_threads_drain_2000_items_each_exactly_once(make_worker_ready):
    procs = [
        make_worker_ready(f"drain-{n}", "--queue", "test.record", "--concurrency", "3", "--batch", "8")
        for n in range(4)
    ]
    keys = [f"k{i}" for i in range(2000)]
    stop = threading.Event()
    threads = [threading.Thread(target=thread_claimer, args=(f"thread-{n}", stop), daemon=True) for n in range(2)]
    WorkItem.objects.enqueue_many([("test.record", k) for k in keys])
    for t in threads:
        t.start()
    try:
        wait_until(lambda: not WorkItem.objects.live().exists(), timeout=90, message="the queue to drain")
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    for proc in procs:
        proc.signal(signal.SIGTERM)
    for proc in procs:
        assert proc.wait(30) == 0, proc.output()[-3000:]

    per_key = Counter(Completion.objects.values_list("key", flat=True))
    assert set(per_key) == set(keys)
    assert max(per_key.values()) == 1, [k for k, n in per_key.items() if n > 1][:10]
    assert WorkItem.objects.succeeded().count() == 2000
    assert not WorkItem.objects.unsettled().exists()
    by_worker = Counter(Completion.objects.values_list("worker_id", flat=True))
    assert {f"drain-{n}" for n in range(4)} <= set(by_worker), by_worker
    assert {"thread-0", "thread-1"} & set(by_worker), by_worker
    # Nobody's work was claimed twice: every item took exactly one attempt.
    assert set(WorkItem.objects.values_list("attempts", flat=True)) == {1}


def test_workers_settling_in_batches_run_each_item_once_and_settle_it_once(make_worker_ready):
    # test.batched records each run and returns: the worker's settler completes items many
    # per statement, which is the path no-op throughput depends on.
    procs = [
        make_worker_ready(f"batch-{n}", "--queue", "test.batched", "--concurrency", "4", "--batch", "50")
        for n in range(3)
    ]
    keys = [f"b{i}" for i in range(2000)]
    WorkItem.objects.enqueue_many([("test.batched", k) for k in keys])
    wait_until(lambda: not WorkItem.objects.live().exists(), timeout=90, message="the queue to drain")
    for proc in procs:
        proc.signal(signal.SIGTERM)
    for proc in procs:
        assert proc.wait(30) == 0, proc.output()[-3000:]
        assert "0 leases lost" in proc.output(), proc.output()[-2000:]
    per_key = Counter(Completion.objects.values_list("key", flat=True))
    assert set(per_key) == set(keys) and max(per_key.values()) == 1
    assert WorkItem.objects.filter(queue="test.batched").succeeded().count() == 2000
    assert set(WorkItem.objects.values_list("attempts", flat=True)) == {1}
    assert len(set(Completion.objects.values_list("worker_id", flat=True))) == 3


class HeldSampler(threading.Thread):
    """Sample how many items of a queue are held under a live lease, every 20 ms."""

    def __init__(self, queue: str):
        super().__init__(daemon=True)
        self.queue = queue
        self.samples: list[int] = []
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.samples.append(
                    WorkItem.objects.filter(queue=self.queue).held().filter(lease_expires_at__gt=Now()).count()
                )
                time.sleep(0.02)
        finally:
            connections.close_all()


def test_max_running_holds_across_four_workers_and_a_saturated_queue_does_not_stall_others(make_worker_ready):
    sampler = HeldSampler("test.capped")
    sampler.start()
    names = [f"cap-{n}" for n in range(4)]
    procs = [
        make_worker_ready(name, "--queue", "test.capped", "--queue", "test.other", "--concurrency", "4", "--batch", "4")
        for name in names
    ]
    # Capped items hold their slot until the test says "go": the cap stays full for as long
    # as the test needs to watch the other queue flow past it.
    capped = [
        {"queue": "test.capped", "key": f"c{i:02}", "metadata": {"until": "go", "seconds": "0.1"}} for i in range(12)
    ]
    WorkItem.objects.enqueue_many(capped)
    run_after = dict(WorkItem.objects.filter(queue="test.capped").values_list("key", "run_after"))
    capped_held = WorkItem.objects.filter(queue="test.capped").held()
    try:
        wait_until(lambda: capped_held.count() == 3, timeout=20, message="the cap to fill")
        WorkItem.objects.enqueue_many([("test.other", f"o{i}") for i in range(40)])
        wait_until(
            lambda: WorkItem.objects.filter(queue="test.other").succeeded().count() == 40,
            timeout=30,
            message="test.other to drain while test.capped is saturated",
        )
        # Still saturated, and every item the claims skipped meanwhile is untouched.
        assert capped_held.count() == 3
        skipped = WorkItem.objects.filter(queue="test.capped").queued()
        assert skipped.count() == 9
        assert set(skipped.values_list("attempts", flat=True)) == {0}
        assert all(run_after[k] == ra for k, ra in skipped.values_list("key", "run_after"))
        Sample.objects.create(name="go", value=1)
        wait_until(
            lambda: not WorkItem.objects.filter(queue="test.capped").unsettled().exists(),
            timeout=60,
            message="test.capped to drain",
        )
    finally:
        Sample.objects.get_or_create(name="go", value=1)
        sampler.stop.set()
        sampler.join(5)
        for proc in procs:
            proc.signal(signal.SIGTERM)
    for proc in procs:
        assert proc.wait(30) == 0, proc.output()[-3000:]

    assert len(sampler.samples) > 50
    assert max(sampler.samples) == 3, Counter(sampler.samples)
    handler_seen = Sample.objects.filter(name="capped_held").aggregate(n=Count("id"), top=Max("value"))
    assert handler_seen == {"n": 12, "top": 3}
    # The same workers (each serving both queues) ran both: a claim that finds the cap full
    # moves on to the other queue in the same pass.
    other_by = set(WorkItem.objects.filter(queue="test.other").values_list("claimed_by", flat=True))
    capped_by = set(Completion.objects.filter(queue="test.capped").values_list("worker_id", flat=True))
    assert other_by <= set(names) and capped_by <= set(names)
    assert len(other_by | capped_by) >= 2
    # Skipped while the cap was full, capped items were never charged or moved.
    assert set(WorkItem.objects.filter(queue="test.capped").values_list("attempts", flat=True)) == {1}
    assert dict(WorkItem.objects.filter(queue="test.capped").values_list("key", "run_after")) == run_after
    completed = Counter(Completion.objects.filter(queue="test.capped").values_list("key", flat=True))
    assert completed == Counter(set(run_after))


def test_a_full_cap_leaves_skipped_items_untouched():
    WorkItem.objects.enqueue_many([("test.capped", f"c{i}") for i in range(5)])
    before = {r["key"]: r for r in WorkItem.objects.values("key", "run_after", "attempts", "state")}
    first = WorkItem.objects.claim(["test.capped"], limit=10, worker_id="a").items
    assert len(first) == 3
    assert WorkItem.objects.claim(["test.capped", "test.other"], limit=10, worker_id="b").items == []
    for key, r in before.items():
        if key not in {i.key for i in first}:
            assert WorkItem.objects.filter(key=key).values("key", "run_after", "attempts", "state").get() == r
    WorkItem.objects.complete(first[0])
    assert len(WorkItem.objects.claim(["test.capped"], limit=10, worker_id="b").items) == 1


def test_a_reclaimed_item_takes_a_slot_of_the_cap_too():
    WorkItem.objects.enqueue_many([("test.capped", f"c{i}") for i in range(6)])
    held = WorkItem.objects.claim(["test.capped"], limit=3, worker_id="a").items
    # One holder died: its lease lapsed, so two slots are live and one is free.
    WorkItem.objects.filter(pk=held[0].id).update(lease_expires_at=Now() - dt.timedelta(seconds=1))
    got = WorkItem.objects.claim(["test.capped"], limit=10, worker_id="b").items
    assert len(got) == 1
    live = WorkItem.objects.filter(queue="test.capped").held().filter(lease_expires_at__gt=Now()).count()
    assert live == 3


def test_concurrent_claimers_on_a_capped_queue_never_exceed_the_cap():
    WorkItem.objects.enqueue_many([("test.capped", f"c{i}") for i in range(40)])

    def claimer(i: int) -> int:
        held = 0
        for _ in range(10):
            held += len(WorkItem.objects.claim(["test.capped"], limit=2, worker_id=f"t{i}").items)
        return held

    from tests.workqueue.conftest import run_threads

    assert sum(run_threads(claimer, 6)) == 3
    assert WorkItem.objects.filter(queue="test.capped").held().count() == 3


def _claim_in_thread(queues: list[str]) -> tuple[threading.Thread, list]:
    got: list = []

    def claim() -> None:
        try:
            got.extend(WorkItem.objects.claim(queues, limit=10, worker_id="mixed").items)
        finally:
            connections.close_all()

    thread = threading.Thread(target=claim, daemon=True)
    thread.start()
    return thread, got


@pytest.mark.django_db(transaction=True)
def test_an_idle_capped_queue_never_makes_a_claim_of_other_queues_wait_for_its_lock():
    """Plain runworker claims every queue at once; a capped queue with nothing to do must not
    serialise every worker's claims on its cap lock (the site drain ran at 0.66 of the
    single-queue one). A capped queue with due work is still claimed under its lock."""
    from tests.workqueue.conftest import side_connection

    WorkItem.objects.enqueue_many([("test.noop", f"n{i}") for i in range(5)])
    lock = "SELECT pg_advisory_xact_lock(hashtextextended('workqueue.max_running:' || 'test.capped', 0))"
    with side_connection(autocommit=False) as other:
        other.execute(lock)  # another worker's claim holds test.capped's cap lock
        thread, got = _claim_in_thread(["test.noop", "test.capped"])
        thread.join(5)
        assert not thread.is_alive(), "the claim waited for the lock of a capped queue with no work"
        assert sorted(i.key for i in got) == [f"n{i}" for i in range(5)]

        WorkItem.objects.enqueue("test.capped", "c0")  # now it has due work: the lock is needed
        WorkItem.objects.enqueue("test.noop", "n5")
        thread, got = _claim_in_thread(["test.noop", "test.capped"])
        thread.join(0.5)
        assert thread.is_alive() and got == []  # waits for the lock, as the cap needs
        other.rollback()
    thread.join(10)
    assert not thread.is_alive() and sorted(i.key for i in got) == ["c0", "n5"]
