"""Queue statistics: depth, pending, oldest_queued_at and workers_polling."""

from __future__ import annotations

import pytest
from django.db import connection

from tests.workqueue.wire.helpers import by_key, enqueue
from workqueue.models import Poller, WorkItem
from workqueue.wire.serializers import timestamp

pytestmark = pytest.mark.django_db(transaction=True)


def test_stats_across_reservations_acks_and_two_workers(sdk, env, api_key):
    enqueue(env, 4)
    WorkItem.objects.enqueue("test.wire", "scheduled", environment=env.id, delay=3600)
    w1 = sdk(env.key).beta.environments.work
    w2 = sdk(env.key).beta.environments.work
    control = sdk(api_key).beta.environments.work

    before = control.stats(env.id)
    assert (before.depth, before.pending, before.workers_polling) == (4, 0, 0)  # the scheduled one counts nowhere
    assert before.oldest_queued_at == timestamp(by_key("sess_0").created_at)

    a = w1.poll(env.id, anthropic_worker_id="worker-1", reclaim_older_than_ms=60_000)
    b = w2.poll(env.id, anthropic_worker_id="worker-2", reclaim_older_than_ms=60_000)
    w2.poll(env.id, anthropic_worker_id="worker-2", reclaim_older_than_ms=60_000)
    mid = w1.stats(env.id)
    assert (mid.depth, mid.pending, mid.workers_polling) == (1, 3, 2)
    assert mid.oldest_queued_at == timestamp(by_key("sess_0").created_at)  # over depth + pending

    w1.ack(a.id, environment_id=env.id)
    w2.ack(b.id, environment_id=env.id)
    after = control.stats(env.id)
    assert (after.depth, after.pending, after.workers_polling) == (1, 1, 2)  # acked items left the queue
    assert after.oldest_queued_at == timestamp(by_key("sess_2").created_at)

    w1.poll(env.id, anthropic_worker_id="worker-1")  # the same worker again: still two
    assert control.stats(env.id).workers_polling == 2
    assert Poller.objects.filter(environment_id=env.id).count() == 2


def test_stats_of_an_empty_queue_are_zeros_and_null(sdk, env):
    stats = sdk(env.key).beta.environments.work.stats(env.id)
    assert (stats.type, stats.depth, stats.pending, stats.oldest_queued_at, stats.workers_polling) == (
        "work_queue_stats",
        0,
        0,
        None,
        0,
    )


def test_record_poll_prunes_this_environments_stale_pollers(sdk, env, other_env, settings):
    settings.WORKQUEUE = {**settings.WORKQUEUE, "POLLING_WINDOW": 1}
    Poller.objects.create(environment_id=env.id, worker_id="old")
    Poller.objects.create(environment_id=other_env.id, worker_id="elsewhere")
    with connection.cursor() as cur:
        cur.execute("UPDATE work_pollers SET last_seen = now() - interval '1 hour'")
    sdk(env.key).beta.environments.work.poll(env.id, anthropic_worker_id="fresh")
    assert sorted(Poller.objects.values_list("worker_id", flat=True)) == ["elsewhere", "fresh"]


def test_a_failing_record_poll_never_fails_the_poll(sdk, env, monkeypatch):
    from django.db import DatabaseError

    from workqueue.wire.store import WireLane

    def broken(self, environment_id, worker_id):
        raise DatabaseError("pollers table unavailable")

    monkeypatch.setattr(WireLane, "record_poll", broken)
    enqueue(env, 1)
    item = sdk(env.key).beta.environments.work.poll(env.id, anthropic_worker_id="w1")
    assert item is not None and item.data.id == "sess_0"
    assert Poller.objects.count() == 0


def test_new_worker_ids_past_the_poller_cap_are_429_and_reserve_nothing(http, env, settings):
    settings.WORKQUEUE = {**settings.WORKQUEUE, "MAX_POLLERS": 2}
    enqueue(env, 3)
    path = f"/v1/environments/{env.id}/work/poll"

    def poll(worker_id: str):
        return http.get(path, headers={"Authorization": f"Bearer {env.key}", "Anthropic-Worker-ID": worker_id})

    assert poll("w1").status_code == 200
    assert poll("w2").status_code == 200
    refused = poll("w3")
    assert refused.status_code == 429, refused.text
    error = refused.json()["error"]
    assert error["type"] == "rate_limit_error" and "MAX_POLLERS" in error["message"]
    assert error["details"]["error_code"] == "too_many_pollers" and refused.headers["Retry-After"]
    assert sorted(Poller.objects.values_list("worker_id", flat=True)) == ["w1", "w2"]
    assert WorkItem.objects.stats(env.id).pending == 2  # the refused poll reserved nothing
    assert poll("w1").status_code == 200  # a known worker keeps polling
    # Once the others fall out of the polling window, a new worker id takes their place.
    with connection.cursor() as cur:
        cur.execute("UPDATE work_pollers SET last_seen = now() - interval '1 hour'")
    assert poll("w3").status_code == 200
    assert sorted(Poller.objects.values_list("worker_id", flat=True)) == ["w3"]
