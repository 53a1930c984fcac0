"""Many pollers at once: each thread its own SDK client, each request its own server connection."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from workqueue.models import WorkItem

pytestmark = pytest.mark.django_db(transaction=True)

POLLERS = 8
ITEMS = 500


def test_eight_pollers_drain_five_hundred_items_each_handed_and_acked_once(sdk, env):
    WorkItem.objects.enqueue_many(
        [{"queue": "test.wire", "key": f"sess_{i}", "environment": env.id} for i in range(ITEMS)]
    )
    clients = [sdk(env.key, max_retries=0).beta.environments.work for _ in range(POLLERS)]
    handed: list[list[tuple[str, str]]] = [[] for _ in range(POLLERS)]
    acked: list[list[str]] = [[] for _ in range(POLLERS)]
    errors: list[BaseException] = []
    start = threading.Barrier(POLLERS)

    def run(n: int) -> None:
        work = clients[n]
        try:
            start.wait()
            while True:
                # A window far longer than the test: a reservation can only end by its ack.
                item = work.poll(env.id, reclaim_older_than_ms=600_000, anthropic_worker_id=f"poller-{n}")
                if item is None:
                    return
                handed[n].append((item.id, item.data.id))
                acked[n].append(work.ack(item.id, environment_id=env.id).data.id)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(POLLERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors

    keys = Counter(key for per in handed for _id, key in per)
    assert len(keys) == ITEMS and max(keys.values()) == 1  # no item handed out twice
    assert Counter(k for per in acked for k in per) == keys  # every item acked exactly once
    assert sum(1 for per in handed if per) > 1  # the work really was shared
    assert WorkItem.objects.filter(state="starting", attempts=1).count() == ITEMS
    assert WorkItem.objects.filter(queue="test.wire").exclude(state="starting").count() == 0
