"""Wire behaviours the design specifies, each proven: a heartbeat on a stopped item, what an id
rotation keeps, racing metadata patches, and a poll that names no worker."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections

from tests.conftest import wait_until
from tests.workqueue.conftest import side_connection
from tests.workqueue.wire.helpers import by_key, enqueue, row
from workqueue.models import WorkItem

pytestmark = pytest.mark.django_db(transaction=True)

TRACE = {
    "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "tracestate": "vendor=opaque",
}


def auth(env) -> dict[str, str]:
    return {"Authorization": f"Bearer {env.key}"}


def test_a_heartbeat_on_a_stopped_item_succeeds_without_extending_its_lease(sdk, env):
    enqueue(env, 1)
    work = sdk(env.key).beta.environments.work
    item = work.poll(env.id)
    work.ack(item.id, environment_id=env.id)
    beat = work.heartbeat(item.id, environment_id=env.id, expected_last_heartbeat="NO_HEARTBEAT")
    assert beat.lease_extended
    assert work.stop(item.id, environment_id=env.id, force=True).state == "stopped"

    told = work.heartbeat(item.id, environment_id=env.id, expected_last_heartbeat=beat.last_heartbeat)
    assert (told.type, told.state, told.lease_extended) == ("work_heartbeat", "stopped", False)
    stopped = row(item.id)
    assert (stopped.state, stopped.lease_expires_at, stopped.lease_token) == ("stopped", None, None)


def test_metadata_and_trace_context_survive_the_id_rotation_of_a_re_poll(sdk, env):
    (enqueued,) = enqueue(env, 1, metadata={"tenant": "acme", "step": "3"}, trace_context=TRACE)
    work = sdk(env.key).beta.environments.work
    first = work.poll(env.id, reclaim_older_than_ms=200, anthropic_worker_id="gone")
    assert first.id == enqueued.public_id and first.metadata == {"tenant": "acme", "step": "3"}

    again = wait_until(
        lambda: work.poll(env.id, reclaim_older_than_ms=60_000, anthropic_worker_id="next"),
        timeout=10,
        message="the reservation to lapse and the item to be handed out again",
    )
    assert again.id != first.id and again.data.id == first.data.id  # rotated: the same item, renamed
    assert again.metadata == {"tenant": "acme", "step": "3"}
    renamed = by_key("sess_0")
    assert renamed.public_id == again.id and renamed.id == enqueued.id
    assert renamed.metadata == {"tenant": "acme", "step": "3"}
    assert renamed.trace_context == TRACE


def test_two_racing_metadata_patches_both_land(http, env, api_key):
    (item,) = enqueue(env, 1, metadata={"kept": "yes"})
    path = f"/v1/environments/{env.id}/work/{item.public_id}"
    results: dict[str, int] = {}

    def patch(key: str) -> None:
        try:
            response = http.post(
                path, json={"metadata": {key: f"by-{key}"}}, headers={"Authorization": f"Bearer {api_key}"}
            )
            results[key] = response.status_code
        finally:
            connections.close_all()

    # A side transaction locks the row, so both patches are in flight at once, each on its own
    # connection (the live server's request threads), and both wait for the lock. A merge
    # that read the old metadata and wrote it back whole would lose one of the two writes.
    with side_connection(autocommit=False) as side, side.cursor() as cur:
        cur.execute("SELECT 1 FROM work_items WHERE id = %s FOR UPDATE", [item.id])
        threads = [threading.Thread(target=patch, args=(key,)) for key in ("alpha", "beta")]
        for t in threads:
            t.start()
        wait_until(lambda: lock_waiters(item.id) >= 2, timeout=15, message="both patches to wait on the row")
        side.commit()
    for t in threads:
        t.join(15)
    assert results == {"alpha": 200, "beta": 200}
    assert WorkItem.objects.get(pk=item.id).metadata == {"kept": "yes", "alpha": "by-alpha", "beta": "by-beta"}


def lock_waiters(item_id: int) -> int:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query LIKE '%%work_items%%'"
        )
        return cur.fetchone()[0]


def pollers(env_id: str) -> list[str]:
    with connection.cursor() as cur:
        cur.execute("SELECT worker_id FROM work_pollers WHERE environment_id = %s ORDER BY worker_id", [env_id])
        return [r[0] for r in cur.fetchall()]


def test_a_poll_without_a_worker_id_is_not_recorded_as_a_poller(http, env):
    enqueue(env, 1)
    stats = f"/v1/environments/{env.id}/work/stats"
    anonymous = http.get(f"/v1/environments/{env.id}/work/poll", headers=auth(env))
    assert anonymous.status_code == 200 and anonymous.json() is not None  # it was served
    assert pollers(env.id) == []
    assert http.get(stats, headers=auth(env)).json()["workers_polling"] == 0

    named = http.get(f"/v1/environments/{env.id}/work/poll", headers={**auth(env), "Anthropic-Worker-ID": "w-1"})
    assert named.status_code == 200
    assert pollers(env.id) == ["w-1"]  # the same poll with the header is recorded
    assert http.get(stats, headers=auth(env)).json()["workers_polling"] == 1
