"""The flow claim on its own connection and from threads: a stale cache, per-group rates,
overrides on a queue with no settings limits, and concurrent claimers under a group cap."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pytest
from django.db import connection
from django.db.models.functions import Now

from tests.workqueue.conftest import run_threads
from workqueue import controls
from workqueue.models import QueueStart, WorkItem

pytestmark = pytest.mark.django_db(transaction=True)


def claim(*queues: str, limit: int = 50, worker: str = "w") -> list:
    return WorkItem.objects.claim(list(queues), limit=limit, worker_id=worker).items


def test_a_stale_cache_of_the_controls_delays_a_claim_but_never_breaks_a_pause():
    WorkItem.objects.enqueue_many([("test.flow", f"k{i}") for i in range(4)])
    assert controls.gated_queues() == frozenset()  # cached: nothing under control
    with connection.cursor() as cur:  # another host pauses it; this process hears nothing
        cur.execute(
            "INSERT INTO work_queue_controls (queue, paused, updated_at, updated_by) "
            "VALUES ('test.flow', true, now(), 'x')"
        )
    assert controls.gated_queues() == frozenset()  # still the stale view: the plain claim runs
    assert claim("test.flow") == []  # ... and its guard claims nothing from the paused queue
    controls.invalidate()
    assert controls.gated_queues() == {"test.flow"}
    assert claim("test.flow") == []  # the flow claim reads the pause itself
    with connection.cursor() as cur:  # resumed elsewhere; the cache still says "controlled"
        cur.execute("UPDATE work_queue_controls SET paused = false WHERE queue = 'test.flow'")
    assert len(claim("test.flow")) == 4
    assert set(WorkItem.objects.values_list("attempts", flat=True)) == {1}


def test_a_paused_queue_does_not_hold_back_another_in_the_same_claim():
    WorkItem.objects.enqueue_many([("test.flow", "f1"), ("test.other", "o1"), ("test.other", "o2")])
    controls.pause("test.flow")
    assert sorted(i.key for i in claim("test.flow", "test.other")) == ["o1", "o2"]
    assert WorkItem.objects.get(key="f1").attempts == 0


def test_an_override_cap_and_a_per_group_rate_bind_a_queue_the_settings_leave_unlimited():
    WorkItem.objects.enqueue_many(
        [{"queue": "test.flow", "key": f"{g}{i}", "group": g} for g in ("a", "b") for i in range(5)]
        + [{"queue": "test.flow", "key": f"n{i}"} for i in range(5)]
    )
    controls.write("test.flow", limits={"rate_per_group": "2/m"})
    first = claim("test.flow")
    keys = Counter(i.key[0] for i in first)
    assert keys == {"a": 2, "b": 2, "n": 5}  # ungrouped items are under the queue's limits only
    assert claim("test.flow") == []
    assert QueueStart.objects.filter(queue="test.flow").count() == 9
    # A queue-wide cap from an override, on top: every held item counts.
    controls.write("test.flow", limits={"max_running": 10}, clear=["rate_per_group"])
    assert len(claim("test.flow")) == 1
    assert claim("test.flow") == []


def test_a_queue_rate_counts_the_starts_inside_its_window_and_only_those():
    """rate=3/m: three starts in the last minute use the queue's whole rate; starts older than
    the window count for nothing."""
    WorkItem.objects.enqueue_many([("test.flow", f"r{i}") for i in range(6)])
    QueueStart.objects.bulk_create(QueueStart(queue="test.flow") for _ in range(5))
    QueueStart.objects.update(started_at=Now() - dt.timedelta(minutes=5))  # outside the window
    controls.write("test.flow", limits={"rate": "3/m"})
    assert len(claim("test.flow")) == 3  # the old starts leave the whole rate
    assert claim("test.flow") == []  # the three new ones, inside the window, use it up
    assert WorkItem.objects.filter(queue="test.flow", state="queued", attempts=0).count() == 3


def test_concurrent_claimers_under_a_group_cap_never_hold_more_than_the_cap_per_group():
    WorkItem.objects.enqueue_many(
        [{"queue": "test.grouped", "key": f"{g}-{i}", "group": f"g{g}"} for g in range(6) for i in range(20)]
    )

    def claimer(n: int) -> list[str]:
        got = []
        for _ in range(10):
            got += [i.key for i in WorkItem.objects.claim(["test.grouped"], limit=7, worker_id=f"t{n}").items]
        return got

    taken = [k for keys in run_threads(claimer, 6) for k in keys]
    assert len(taken) == len(set(taken)) == 12  # six groups, two each, and nothing twice
    assert Counter(k.split("-")[0] for k in taken) == {str(g): 2 for g in range(6)}
