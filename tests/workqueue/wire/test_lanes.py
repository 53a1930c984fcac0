"""The two lanes never hand out the same item: Poll serves only wire items, runworker never does."""

from __future__ import annotations

import anthropic
import pytest

from tests.testapp.models import Completion
from tests.workqueue.wire.helpers import enqueue
from workqueue.models import WorkItem

pytestmark = pytest.mark.django_db(transaction=True)


def test_enqueue_marks_exactly_self_hosted_over_wire_items(env, cloud_env):
    (wire,) = enqueue(env, 1, prefix="wire")
    (cloud,) = enqueue(cloud_env, 1, prefix="cloud")
    (plain,) = enqueue(None, 1, prefix="plain")
    (not_wire_queue,) = enqueue(env, 1, queue="test.noop", prefix="noop")
    assert [wire.wire, cloud.wire, plain.wire, not_wire_queue.wire] == [True, False, False, False]


def test_poll_never_returns_cloud_or_non_wire_items(sdk, env, cloud_env, api_key):
    cloud_items = enqueue(cloud_env, 3, prefix="cloud")
    enqueue(env, 3, queue="test.noop", prefix="noop")
    enqueue(None, 3, prefix="plain")

    assert sdk(cloud_env.key).beta.environments.work.poll(cloud_env.id) is None
    assert sdk(env.key).beta.environments.work.poll(env.id) is None
    assert list(sdk(cloud_env.key).beta.environments.work.list(cloud_env.id)) == []
    assert list(sdk(env.key).beta.environments.work.list(env.id)) == []

    control = sdk(api_key).beta.environments.work
    stats = control.stats(cloud_env.id)
    assert (stats.depth, stats.pending, stats.oldest_queued_at, stats.workers_polling) == (0, 0, None, 0)
    with pytest.raises(anthropic.NotFoundError):
        control.retrieve(cloud_items[0].public_id, environment_id=cloud_env.id)
    with pytest.raises(anthropic.NotFoundError):
        sdk(cloud_env.key).beta.environments.work.ack(cloud_items[0].public_id, environment_id=cloud_env.id)
    assert WorkItem.objects.filter(handed_out=True).count() == 0
    assert WorkItem.objects.exclude(lease_expires_at=None).count() == 0


def test_runworker_never_claims_wire_items(start_worker, env, cloud_env):
    wire_items = enqueue(env, 5, prefix="wire")
    enqueue(cloud_env, 2, prefix="cloud")
    enqueue(None, 1, prefix="plain")
    proc = start_worker(
        "--queue",
        "test.wire",
        "--max-seconds",
        "3",
        env={"DJANGO_SETTINGS_MODULE": "tests.workqueue.wire.worker_settings"},
    )
    assert proc.wait(60) == 0, proc.output()
    assert sorted(Completion.objects.values_list("key", flat=True)) == ["cloud_0", "cloud_1", "plain_0"]
    for item in wire_items:
        fresh = WorkItem.objects.get(pk=item.id)
        assert (fresh.state, fresh.attempts, fresh.claimed_by, fresh.started_at) == ("queued", 0, "", None)
