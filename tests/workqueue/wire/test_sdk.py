"""The official Anthropic SDK, unchanged, against this server (pytest-django's live_server)."""

from __future__ import annotations

import anthropic
import pytest
from anthropic.lib.environments import iter_work
from anthropic.types.beta.environments import BetaHeartbeatPreconditionFailedError
from django.db import connection

from tests.workqueue.wire.helpers import by_key, enqueue, row
from workqueue.models import WorkItem

pytestmark = pytest.mark.django_db(transaction=True)


def test_poll_ack_heartbeats_with_echo_then_graceful_stop(sdk, env):
    enqueue(env, 1, metadata={"tenant": "acme"})
    work = sdk(env.key).beta.environments.work

    item = work.poll(env.id, anthropic_worker_id="worker-a", reclaim_older_than_ms=30_000)
    assert item is not None
    assert (item.type, item.state, item.environment_id) == ("work", "queued", env.id)
    assert item.data.type == "session" and item.data.id == "sess_0"
    assert item.metadata == {"tenant": "acme"}
    assert item.created_at.endswith("Z") and len(item.created_at) == len("2025-01-01T00:00:00.000000Z")
    assert item.acknowledged_at is None and item.secret is None

    acked = work.ack(item.id, environment_id=env.id)
    assert acked.id == item.id and acked.state == "starting" and acked.acknowledged_at is not None
    assert row(item.id).attempts == 1

    first = work.heartbeat(item.id, environment_id=env.id, expected_last_heartbeat="NO_HEARTBEAT")
    assert (first.type, first.state, first.lease_extended) == ("work_heartbeat", "active", True)
    assert first.ttl_seconds == 60 and first.last_heartbeat.endswith("Z")

    beats = [first]
    for _ in range(3):
        beats.append(
            work.heartbeat(
                item.id,
                environment_id=env.id,
                expected_last_heartbeat=beats[-1].last_heartbeat,
                desired_ttl_seconds=15,
            )
        )
    assert all(b.lease_extended and b.state == "active" and b.ttl_seconds == 15 for b in beats[1:])
    stamps = [b.last_heartbeat for b in beats]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)

    got = sdk(env.key).beta.environments.work  # the environment key may stop its own item
    stopped = got.stop(item.id, environment_id=env.id)
    assert stopped.state == "stopping" and stopped.stop_requested_at is not None and stopped.stopped_at is None
    assert stopped.latest_heartbeat_at == beats[-1].last_heartbeat

    winding_down = work.heartbeat(item.id, environment_id=env.id, expected_last_heartbeat="not even a timestamp")
    assert winding_down.lease_extended is False and winding_down.state == "stopping"


def test_iter_work_drains_fifty_items(sdk, env):
    enqueue(env, 50)
    work = sdk(env.key).beta.environments.work
    seen = []
    for item in iter_work(work, environment_id=env.id, worker_id="drainer", block_ms=None, drain=True):
        # iter_work yields the polled object; by now the poller has acked it.
        assert row(item.id).state == "starting"
        seen.append(item.data.id)
    assert sorted(seen) == sorted(f"sess_{i}" for i in range(50))
    # iter_work stops each item after its body: a starting item stops outright.
    assert WorkItem.objects.filter(queue="test.wire").stopped().count() == 50
    assert WorkItem.objects.filter(queue="test.wire", attempts=1).count() == 50


def test_stale_heartbeat_raises_the_sdk_412_with_current_state(sdk, env):
    enqueue(env, 1)
    work = sdk(env.key).beta.environments.work
    item = work.poll(env.id)
    work.ack(item.id, environment_id=env.id)
    first = work.heartbeat(item.id, environment_id=env.id, expected_last_heartbeat="NO_HEARTBEAT")
    second = work.heartbeat(item.id, environment_id=env.id, expected_last_heartbeat=first.last_heartbeat)

    with pytest.raises(BetaHeartbeatPreconditionFailedError) as caught:
        work.heartbeat(item.id, environment_id=env.id, expected_last_heartbeat=first.last_heartbeat)
    err = caught.value
    assert err.status_code == 412
    assert err.error_code == "heartbeat_precondition_failed"
    state = err.details.current_state
    assert state.last_heartbeat == second.last_heartbeat
    assert state.lease_extended is False and state.state == "active"
    assert 0 < state.ttl_seconds <= 60
    assert err.response.headers["x-should-retry"] == "false"
    # The refused beat changed nothing.
    assert row(item.id).last_heartbeat_at.isoformat().startswith(second.last_heartbeat[:19])


def test_unparseable_echo_is_412_and_an_equivalent_spelling_is_accepted(sdk, env):
    enqueue(env, 1)
    work = sdk(env.key).beta.environments.work
    item = work.poll(env.id)
    work.ack(item.id, environment_id=env.id)
    first = work.heartbeat(item.id, environment_id=env.id, expected_last_heartbeat="NO_HEARTBEAT")
    with pytest.raises(BetaHeartbeatPreconditionFailedError):
        work.heartbeat(item.id, environment_id=env.id, expected_last_heartbeat="yesterday")
    # The echo is compared after parsing: the same instant with an explicit offset matches.
    same_instant = first.last_heartbeat.replace("Z", "+00:00")
    assert work.heartbeat(item.id, environment_id=env.id, expected_last_heartbeat=same_instant).lease_extended


def test_stop_of_a_stopped_item_is_409_for_the_sdk(sdk, env):
    enqueue(env, 1)
    work = sdk(env.key).beta.environments.work
    item = work.poll(env.id)
    work.ack(item.id, environment_id=env.id)
    stopped = work.stop(item.id, environment_id=env.id, force=True)
    assert stopped.state == "stopped" and stopped.stopped_at is not None
    with pytest.raises(anthropic.ConflictError) as caught:
        work.stop(item.id, environment_id=env.id)
    assert caught.value.response.headers["x-should-retry"] == "false"
    with pytest.raises(anthropic.ConflictError):
        work.stop(item.id, environment_id=env.id, force=True)
    with pytest.raises(anthropic.ConflictError):
        work.ack(item.id, environment_id=env.id)


def test_get_update_metadata_list_and_stats_through_the_sdk(sdk, env, api_key):
    enqueue(env, 3, metadata={"a": "1", "b": "2"})
    control = sdk(api_key).beta.environments.work
    work = sdk(env.key).beta.environments.work

    page = work.list(env.id, limit=2)
    assert [w.data.id for w in page.data] == ["sess_2", "sess_1"]
    assert page.has_next_page()
    rest = page.get_next_page()
    assert [w.data.id for w in rest.data] == ["sess_0"] and not rest.has_next_page()
    assert [w.data.id for w in work.list(env.id)] == ["sess_2", "sess_1", "sess_0"]

    target = by_key("sess_1").public_id
    got = control.retrieve(target, environment_id=env.id)
    assert got.id == target and got.metadata == {"a": "1", "b": "2"}

    updated = control.update(target, environment_id=env.id, metadata={"a": None, "c": "3"})
    assert updated.metadata == {"b": "2", "c": "3"}
    assert by_key("sess_1").metadata == {"b": "2", "c": "3"}

    stats = control.stats(env.id)
    assert (stats.type, stats.depth, stats.pending) == ("work_queue_stats", 3, 0)
    assert work.stats(env.id).depth == 3


def test_blocking_poll_wakes_on_enqueue(sdk, env):
    import threading
    import time

    work = sdk(env.key).beta.environments.work
    assert work.poll(env.id, block_ms=50) is None  # starts the shared listener

    def later():
        time.sleep(0.2)
        try:
            enqueue(env, 1, prefix="late")
        finally:
            connection.close()

    thread = threading.Thread(target=later)
    thread.start()
    item = work.poll(env.id, block_ms=999)
    thread.join()
    # A blocked poll looks again only when woken: it does not retry when block_ms runs out, so
    # getting the item enqueued 0.2 s into the wait is the proof that the NOTIFY woke it.
    assert item is not None and item.data.id == "late_0"


def test_heartbeat_accepts_its_parameters_in_a_json_body(http, sdk, env):
    enqueue(env, 1)
    work = sdk(env.key).beta.environments.work
    item = work.poll(env.id)
    work.ack(item.id, environment_id=env.id)
    path = f"/v1/environments/{env.id}/work/{item.id}/heartbeat"
    auth = {"Authorization": f"Bearer {env.key}"}
    first = http.post(path, json={"expected_last_heartbeat": "NO_HEARTBEAT", "desired_ttl_seconds": 20}, headers=auth)
    assert first.status_code == 200, first.text
    assert first.json()["ttl_seconds"] == 20 and first.json()["state"] == "active"
    echo = first.json()["last_heartbeat"]
    second = http.post(path, json={"expected_last_heartbeat": echo}, headers=auth)
    assert second.status_code == 200 and second.json()["last_heartbeat"] > echo
