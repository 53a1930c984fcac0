"""Flow control with real ``runworker`` processes: pause, per-group caps, rates, overrides."""

from __future__ import annotations

import datetime as dt
import signal
import threading
import time
from collections import Counter

import pytest
from django.db import connection, connections
from django.db.models import Count
from django.db.models.functions import Now

from tests.conftest import wait_until
from tests.testapp.models import Completion, Sample
from workqueue import controls
from workqueue.models import QueueStart, WorkItem

pytestmark = pytest.mark.django_db(transaction=True)


def db_now() -> dt.datetime:
    with connection.cursor() as cur:
        cur.execute("SELECT now()")
        return cur.fetchone()[0]


class GroupSampler(threading.Thread):
    """Sample, every 20 ms, how many items of each group of a queue hold a live lease."""

    def __init__(self, queue: str):
        super().__init__(daemon=True)
        self.queue = queue
        self.samples: list[dict[str | None, int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                rows = (
                    WorkItem.objects.filter(queue=self.queue)
                    .held()
                    .filter(lease_expires_at__gt=Now())
                    .values("group_key")
                    .annotate(n=Count("id"))
                )
                self.samples.append({r["group_key"]: r["n"] for r in rows})
                time.sleep(0.02)
        finally:
            connections.close_all()

    def __enter__(self) -> GroupSampler:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.join(5)

    def top(self) -> int:
        return max((n for s in self.samples for n in s.values()), default=0)


def stop_all(procs) -> None:
    for proc in procs:
        proc.signal(signal.SIGTERM)
    for proc in procs:
        assert proc.wait(30) == 0, proc.output()[-3000:]


def test_pause_with_two_workers_draining_stops_claims_within_a_second_running_items_finish_and_resume_drains(
    make_worker_ready,
):
    keys = [f"p{i:03}" for i in range(150)]
    WorkItem.objects.enqueue_many([{"queue": "test.flow", "key": k, "metadata": {"seconds": "0.2"}} for k in keys])
    procs = [
        make_worker_ready(f"pause-{n}", "--queue", "test.flow", "--concurrency", "2", "--batch", "2") for n in range(2)
    ]
    items = WorkItem.objects.filter(queue="test.flow")
    wait_until(lambda: items.succeeded().count() >= 10, timeout=60, message="the drain to get going")

    controls.pause("test.flow", by="test")
    paused_at = db_now()  # a new transaction, after the pause committed
    time.sleep(2.5)
    late = items.filter(started_at__gt=paused_at + dt.timedelta(seconds=1))
    assert not late.exists(), list(late.values_list("key", "started_at"))
    # What was running when the pause landed finishes normally; the rest waits, uncharged.
    wait_until(lambda: not items.held().exists(), timeout=20, message="the running items to finish")
    waiting = items.queued()
    assert waiting.count() >= 50
    assert set(waiting.values_list("attempts", flat=True)) == {0}
    assert not items.stuck(stuck_after=0).exists()  # paused: waiting by design, not stuck
    # Enqueue is still accepted while paused.
    WorkItem.objects.enqueue("test.flow", "while-paused")
    time.sleep(1.0)
    assert items.filter(key="while-paused", state="queued", attempts=0).exists()

    controls.resume("test.flow", by="test")
    wait_until(lambda: not items.live().exists(), timeout=90, message="the queue to drain after resume")
    stop_all(procs)
    per_key = Counter(Completion.objects.filter(queue="test.flow").values_list("key", flat=True))
    assert set(per_key) == {*keys, "while-paused"} and max(per_key.values()) == 1
    assert set(items.values_list("attempts", flat=True)) == {1}


def test_max_running_per_group_2_across_three_workers_never_exceeded_groups_progress_together_other_queue_flows(
    make_worker_ready,
):
    procs = [
        make_worker_ready(
            f"grp-{n}", "--queue", "test.grouped", "--queue", "test.other", "--concurrency", "4", "--batch", "4"
        )
        for n in range(3)
    ]
    grouped = WorkItem.objects.filter(queue="test.grouped")
    with GroupSampler("test.grouped") as sampler:
        # Group by group, so the head of the queue is one group: the claim must look past it.
        WorkItem.objects.enqueue_many(
            [
                {
                    "queue": "test.grouped",
                    "key": f"t{g}-{i:02}",
                    "group": f"tenant-{g}",
                    "metadata": {"seconds": "0.25"},
                }
                for g in range(5)
                for i in range(40)
            ]
        )
        WorkItem.objects.enqueue_many([("test.other", f"o{i}") for i in range(40)])
        wait_until(
            lambda: WorkItem.objects.filter(queue="test.other").succeeded().count() == 40,
            timeout=60,
            message="test.other to drain beside the grouped queue",
        )
        assert grouped.live().exists(), "the other queue finished only after the grouped one"

        def first_group_done():
            done = dict(grouped.succeeded().values_list("group_key").annotate(n=Count("id")))
            return done if any(n == 40 for n in done.values()) else None

        done = wait_until(first_group_done, timeout=120, message="a group to finish")
        wait_until(lambda: not grouped.live().exists(), timeout=120, message="test.grouped to drain")
    stop_all(procs)

    assert len(sampler.samples) > 50
    assert sampler.top() == 2, Counter(n for s in sampler.samples for n in s.values())
    # Every group ran alongside the others: when the first finished, each had done a good part.
    assert set(done) == {f"tenant-{g}" for g in range(5)}, done
    assert min(done.values()) >= 15, done
    assert max(len(s) for s in sampler.samples) == 5
    assert set(grouped.values_list("attempts", flat=True)) == {1}
    per_key = Counter(Completion.objects.filter(queue="test.grouped").values_list("key", flat=True))
    assert len(per_key) == 200 and max(per_key.values()) == 1


def test_rate_20_per_second_with_two_workers_never_exceeds_the_limit_in_any_second_and_charges_no_held_item(
    make_worker_ready,
):
    WorkItem.objects.enqueue_many(
        [{"queue": "test.rated", "key": f"r{i:03}", "metadata": {"seconds": "0"}} for i in range(300)]
    )
    items = WorkItem.objects.filter(queue="test.rated")
    procs = [
        make_worker_ready(f"rate-{n}", "--queue", "test.rated", "--concurrency", "4", "--batch", "10") for n in range(2)
    ]
    first = wait_until(
        lambda: (
            items.filter(started_at__isnull=False).order_by("started_at").values_list("started_at", flat=True).first()
        ),
        timeout=60,
        message="the first start",
    )
    wait_until(lambda: db_now() > first + dt.timedelta(seconds=5.5), timeout=30, message="5 s of starts")
    stop_all(procs)

    starts = sorted(items.filter(started_at__isnull=False).values_list("started_at", flat=True))
    assert len(starts) >= 40, len(starts)  # the limit let work through over 5 s
    window = dt.timedelta(seconds=1)
    busiest = max(sum(1 for t in starts[i:] if t < s + window) for i, s in enumerate(starts))
    assert busiest <= 20, busiest  # the documented precision: exact (no start over the limit)
    # The limit held items back: they stayed queued, charged nothing, and are not stuck.
    waiting = items.queued()
    assert waiting.count() >= 100
    assert set(waiting.values_list("attempts", flat=True)) == {0}
    assert not items.stuck(stuck_after=0).exists()  # rate-limited: waiting by design, not stuck
    assert set(items.succeeded().values_list("attempts", flat=True)) == {1}
    assert QueueStart.objects.filter(queue="test.rated").count() >= 20


def test_a_sigkilled_worker_holding_a_capped_groups_items_frees_the_slots_when_the_leases_lapse(
    make_worker_ready, start_worker
):
    grouped = WorkItem.objects.filter(queue="test.grouped.lapse")
    with GroupSampler("test.grouped.lapse") as sampler:
        WorkItem.objects.enqueue_many(
            [
                {"queue": "test.grouped.lapse", "key": f"g{i}", "group": "acme", "metadata": {"until": "go"}}
                for i in range(4)
            ]
        )
        doomed = make_worker_ready("doomed", "--queue", "test.grouped.lapse", "--concurrency", "4")
        wait_until(
            lambda: grouped.filter(state="active", claimed_by="doomed").count() == 2,
            timeout=30,
            message="the doomed worker to fill the group",
        )
        time.sleep(0.5)
        assert grouped.filter(state="active").count() == 2  # the cap held it to two of four
        doomed.kill()
        # Another group is not blocked by the dead worker's held slots.
        WorkItem.objects.enqueue("test.grouped.lapse", "other", group="globex")
        Sample.objects.create(name="go", value=1)
        heir = make_worker_ready("heir", "--queue", "test.grouped.lapse", "--concurrency", "4")
        wait_until(lambda: not grouped.live().exists(), timeout=60, message="the group to drain after its leases lapse")
    heir.signal(signal.SIGTERM)
    assert heir.wait(30) == 0, heir.output()[-3000:]

    assert sampler.top() == 2
    done = Completion.objects.filter(queue="test.grouped.lapse")
    assert set(done.values_list("key", flat=True)) == {"g0", "g1", "g2", "g3", "other"}
    assert set(done.values_list("worker_id", flat=True)) == {"heir"}
    assert done.filter(reclaimed=True).count() == 2  # the dead worker's two, taken back by the claim itself
    assert grouped.succeeded().count() == 5


def test_a_runtime_override_binds_a_worker_started_before_it_and_clearing_it_returns_to_the_setting(
    make_worker_ready,
):
    worker = make_worker_ready("override", "--queue", "test.grouped", "--concurrency", "6", "--batch", "6")
    controls.write("test.grouped", limits={"max_running_per_group": 1}, by="test")
    grouped = WorkItem.objects.filter(queue="test.grouped")
    live_held = grouped.held().filter(lease_expires_at__gt=Now())
    with GroupSampler("test.grouped") as sampler:
        WorkItem.objects.enqueue_many(
            [{"queue": "test.grouped", "key": f"o{i}", "group": "solo", "metadata": {"until": "go"}} for i in range(6)]
        )
        wait_until(lambda: live_held.count() == 1, timeout=30, message="the override's one slot to fill")
        time.sleep(1.5)
        assert sampler.top() == 1  # the setting says 2; the override says 1, and wins
        overridden = len(sampler.samples)

        controls.write("test.grouped", clear=["max_running_per_group"], by="test")
        wait_until(lambda: live_held.count() == 2, timeout=10, message="the setting's second slot")
        time.sleep(1.0)
        assert max(n for s in sampler.samples[overridden:] for n in s.values()) == 2
        Sample.objects.create(name="go", value=1)
        wait_until(lambda: not grouped.live().exists(), timeout=60, message="the queue to drain")
    stop_all([worker])
    assert set(grouped.values_list("attempts", flat=True)) == {1}


def test_resume_wakes_an_idle_worker_by_notify_long_before_its_poll_backstop(make_worker_ready):
    # The worker's backstop poll is 600 s and the wait below is 60 s: only the resume's NOTIFY
    # can get the held-back item claimed in time.
    controls.pause("test.flow", by="test")
    proc = make_worker_ready("wake-1", "--queue", "test.flow", "--poll", "600")
    WorkItem.objects.enqueue("test.flow", "held", metadata={"seconds": "0"})
    time.sleep(1.5)
    held = WorkItem.objects.get(queue="test.flow", key="held")
    assert (held.state, held.attempts) == ("queued", 0)

    controls.resume("test.flow", by="test")
    wait_until(
        lambda: Completion.objects.filter(queue="test.flow", key="held").exists(),
        timeout=60,
        message="the resume's NOTIFY to wake the idle worker",
    )
    stop_all([proc])
    assert WorkItem.objects.get(queue="test.flow", key="held").attempts == 1
