"""max_running on wire queues: one definition of a used slot (a holder under a live lease, or a
live poll reservation), applied by claim, poll and ack alike, under the queue's advisory lock.

Acks go through the SDK to the live server, each thread with its own client (each request its
own server thread and database connection).
"""

from __future__ import annotations

import threading
import time

import anthropic
import pytest
from django.conf import settings
from django.db import connection, connections
from django.test import override_settings

from tests.conftest import wait_until
from tests.workqueue.conftest import run_threads
from tests.workqueue.wire.helpers import by_key, enqueue, row
from workqueue import conf
from workqueue.models import WorkItem

pytestmark = pytest.mark.django_db(transaction=True)

ONE = "test.wire.one"


@pytest.fixture(autouse=True)
def _one_slot_queue():
    """A wire queue with a single slot fleet-wide."""
    queues = {**settings.WORKQUEUE["QUEUES"], ONE: {"over_wire": True, "max_running": 1}}
    with override_settings(WORKQUEUE={**settings.WORKQUEUE, "QUEUES": queues}):
        yield


def reservation_lapsed(public_id: str) -> bool:
    with connection.cursor() as cur:
        cur.execute("SELECT lease_expires_at <= now() FROM work_items WHERE public_id = %s", [public_id])
        return cur.fetchone()[0]


def starting(queue: str = ONE) -> int:
    return WorkItem.objects.filter(queue=queue, state__in=["starting", "active"]).count()


def test_concurrent_acks_on_a_one_slot_queue_start_one_item_and_refuse_the_rest_with_409(sdk, env):
    items = enqueue(env, 6, queue=ONE)
    clients = [sdk(env.key, max_retries=0).beta.environments.work for _ in items]
    outcomes: list = [None] * len(items)
    start = threading.Barrier(len(items))

    def ack(n: int) -> None:
        start.wait()
        try:
            outcomes[n] = clients[n].ack(items[n].public_id, environment_id=env.id).state
        except anthropic.APIStatusError as exc:
            outcomes[n] = (exc.status_code, exc.response.headers.get("x-should-retry"), exc.body["error"]["type"])

    threads = [threading.Thread(target=ack, args=(n,)) for n in range(len(items))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(map(str, outcomes)) == sorted(
        ["starting"] + [str((409, "false", "conflict_error"))] * (len(items) - 1)
    ), outcomes
    assert starting() == 1
    refused = [items[n] for n, out in enumerate(outcomes) if out != "starting"]
    assert all((row(i.public_id).state, row(i.public_id).attempts) == ("queued", 0) for i in refused)


def test_a_late_ack_cannot_take_the_slot_another_worker_reserved(sdk, env):
    late = sdk(env.key, max_retries=0).beta.environments.work
    prompt = sdk(env.key, max_retries=0).beta.environments.work
    (first,) = enqueue(env, 1, queue=ONE, prefix="first")
    mine = late.poll(env.id, reclaim_older_than_ms=1, anthropic_worker_id="late")
    assert mine.id == first.public_id
    wait_until(lambda: reservation_lapsed(mine.id), message="the late worker's reservation to lapse")
    # Meanwhile more urgent work arrives and the other worker reserves it: the one slot is its.
    (urgent,) = enqueue(env, 1, queue=ONE, prefix="urgent", priority=10)
    theirs = prompt.poll(env.id, reclaim_older_than_ms=60_000, anthropic_worker_id="prompt")
    assert theirs.id == urgent.public_id

    with pytest.raises(anthropic.ConflictError) as caught:
        late.ack(mine.id, environment_id=env.id)
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert "max_running" in caught.value.message
    assert prompt.ack(theirs.id, environment_id=env.id).state == "starting"
    assert starting() == 1 and by_key("first_0").state == "queued"


def test_an_ack_from_another_worker_than_the_reserving_one_is_refused(sdk, env, http):
    work = sdk(env.key, max_retries=0).beta.environments.work
    enqueue(env, 1, queue="test.wire")
    item = work.poll(env.id, reclaim_older_than_ms=60_000, anthropic_worker_id="owner")
    response = http.post(
        f"/v1/environments/{env.id}/work/{item.id}/ack",
        headers={"Authorization": f"Bearer {env.key}", "Anthropic-Worker-ID": "thief"},
    )
    assert response.status_code == 409 and response.headers["x-should-retry"] == "false"
    assert response.json()["error"]["type"] == "conflict_error"
    assert "reserved by another worker" in response.json()["error"]["message"]
    assert row(item.id).state == "queued"
    # The reserving worker acks (the SDK sends no worker id on ack: the id it was handed is its proof).
    assert work.ack(item.id, environment_id=env.id).state == "starting"


def test_an_ack_before_run_after_is_refused_and_changes_nothing(sdk, env):
    work = sdk(env.key, max_retries=0).beta.environments.work
    (item,) = enqueue(env, 1, queue="test.wire", delay=3600)
    with pytest.raises(anthropic.ConflictError) as caught:
        work.ack(item.public_id, environment_id=env.id)
    assert "run_after" in caught.value.message
    after = row(item.public_id)
    assert (after.state, after.attempts, after.acknowledged_at) == ("queued", 0, None)


def test_a_claim_leaves_the_slot_a_live_wire_reservation_holds(env):
    (wired,) = enqueue(env, 1, queue=ONE, prefix="wired")
    (local,) = enqueue(None, 1, queue=ONE, prefix="local")  # no environment: the in-process lane's
    assert wired.wire and not local.wire
    reserved = WorkItem.objects.poll(env.id, reclaim_older_than_ms=60_000, worker_id="remote").item
    assert reserved is not None and reserved.id == wired.id

    assert WorkItem.objects.claim([ONE], limit=5, worker_id="local").items == []
    assert WorkItem.objects.ack(env.id, reserved.public_id).state == "starting"
    assert starting() == 1


def test_a_cap_declared_in_code_holds_for_poll(env):
    conf.declare_queue("test.wire.declared", over_wire=True, max_running=1)
    try:
        enqueue(env, 2, queue="test.wire.declared")
        assert WorkItem.objects.poll(env.id, reclaim_older_than_ms=60_000).item is not None
        assert WorkItem.objects.poll(env.id, reclaim_older_than_ms=60_000).item is None
    finally:
        conf._declared.pop("test.wire.declared", None)
        conf.wq_settings.cache_clear()


def test_claims_and_wire_acks_racing_on_one_capped_queue_never_exceed_its_cap(env):
    """Both lanes at once, each thread on its own connection: a watcher on another connection
    never sees more used slots (live holders plus live reservations) than max_running."""
    cap, per_lane = 2, 30
    queues = {**settings.WORKQUEUE["QUEUES"], "test.wire.two": {"over_wire": True, "max_running": cap}}
    with override_settings(WORKQUEUE={**settings.WORKQUEUE, "QUEUES": queues}):
        enqueue(env, per_lane, queue="test.wire.two", prefix="wired")
        enqueue(None, per_lane, queue="test.wire.two", prefix="local")
        done = threading.Event()
        seen: list[int] = []
        remaining = [6]
        lock = threading.Lock()

        def body(i: int):
            if i == 0:
                return watch_used_slots(done, seen)
            try:
                return claim_lane(i, done, per_lane, cap) if i % 2 else wire_lane(env, i, done)
            finally:
                with lock:
                    remaining[0] -= 1
                    if not remaining[0]:
                        done.set()

        results = run_threads(body, 7, timeout=240)
    assert sum(r for r in results[1:] if r) == 2 * per_lane
    assert WorkItem.objects.filter(queue="test.wire.two").unsettled().count() == 0
    assert seen and max(seen) <= cap, f"{max(seen)} slots used at once; the cap is {cap}"


def claim_lane(n: int, done: threading.Event, per_lane: int, cap: int) -> int:
    """A worker's claims on test.wire.two, each completed at once; how many it finished."""
    finished = 0
    while finished < per_lane and not done.is_set():
        items = WorkItem.objects.claim(["test.wire.two"], limit=cap, worker_id=f"claimer-{n}").items
        for item in items:
            WorkItem.objects.complete(item)
            finished += 1
        if not WorkItem.objects.filter(queue="test.wire.two", wire=False).unsettled().exists():
            break
        if not items:
            time.sleep(0.005)  # the cap is full: let the other lane finish something
    return finished


def wire_lane(env, n: int, done: threading.Event) -> int:
    """A self-hosted worker's polls, each acked and stopped at once; how many it finished."""
    finished = 0
    while not done.is_set():
        item = WorkItem.objects.poll(env.id, reclaim_older_than_ms=60_000, worker_id=f"poller-{n}").item
        if item is None:
            if not WorkItem.objects.filter(queue="test.wire.two", wire=True).unsettled().exists():
                break
            time.sleep(0.005)  # the cap is full: let the other lane finish something
            continue
        WorkItem.objects.ack(env.id, item.public_id, worker_id=f"poller-{n}")
        WorkItem.objects.stop(env.id, item.public_id, force=True)
        finished += 1
    return finished


def watch_used_slots(done: threading.Event, seen: list[int]) -> None:
    """Until ``done``: the used slots of test.wire.two, read over and over on its own connection."""
    with connections["default"].cursor() as cur:
        while not done.is_set():
            cur.execute(
                "SELECT count(*) FROM work_items WHERE queue = 'test.wire.two' AND lease_expires_at > now() "
                "AND (state IN ('starting', 'active', 'stopping') OR (state = 'queued' AND wire))"
            )
            seen.append(cur.fetchone()[0])
