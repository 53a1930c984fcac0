"""Flow control over the wire: a paused or rate-limited over_wire queue hands nothing out, ack
honours pause, caps, rates and group caps (overrides included), and stats stay correct."""

from __future__ import annotations

import pytest

from tests.workqueue.wire.helpers import enqueue, row
from workqueue import controls
from workqueue.exceptions import WorkConflict
from workqueue.models import QueueStart, WorkItem

pytestmark = pytest.mark.django_db(transaction=True)

Q = "test.wire.flow"


def test_a_paused_wire_queue_hands_nothing_out_and_refuses_acks_until_resumed(env):
    items = enqueue(env, 3, queue=Q)
    reserved = WorkItem.objects.poll(env.id, worker_id="w1").item  # reserved before the pause
    assert reserved is not None
    controls.pause(Q, by="test")
    assert WorkItem.objects.poll(env.id, worker_id="w2").item is None
    with pytest.raises(WorkConflict, match="paused"):
        WorkItem.objects.ack(env.id, reserved.public_id, worker_id="w1")
    assert row(reserved.public_id).state == "queued" and row(reserved.public_id).attempts == 0
    stats = WorkItem.objects.stats(env.id)
    assert (stats.depth, stats.pending) == (2, 1)  # paused items still count as waiting

    controls.resume(Q, by="test")
    assert WorkItem.objects.ack(env.id, reserved.public_id, worker_id="w1").state == "starting"
    handed = WorkItem.objects.poll(env.id, worker_id="w2").item
    assert handed is not None and handed.key in {i.key for i in items}


def test_a_rate_limited_wire_queue_hands_out_only_its_rate_and_ack_logs_each_start(env):
    controls.write(Q, limits={"rate": "2/m"}, by="test")
    enqueue(env, 4, queue=Q)
    first = WorkItem.objects.poll(env.id, worker_id="w").item
    second = WorkItem.objects.poll(env.id, worker_id="w").item
    assert first is not None and second is not None
    # Two reservations spend the minute's two starts: nothing more is handed out.
    assert WorkItem.objects.poll(env.id, worker_id="w").item is None
    for item in (first, second):
        assert WorkItem.objects.ack(env.id, item.public_id, worker_id="w").state == "starting"
    assert QueueStart.objects.filter(queue=Q).count() == 2
    assert WorkItem.objects.poll(env.id, worker_id="w").item is None
    stats = WorkItem.objects.stats(env.id)
    assert (stats.depth, stats.pending) == (2, 0)
    assert set(WorkItem.objects.filter(queue=Q, state="queued").values_list("attempts", flat=True)) == {0}
    # Lifting the rate lets the rest flow.
    controls.write(Q, clear=["rate"], by="test")
    assert WorkItem.objects.poll(env.id, worker_id="w").item is not None


def test_ack_honours_an_override_cap_and_a_group_cap(env):
    a1, a2 = (WorkItem.objects.enqueue(Q, f"a{i}", environment=env.id, group="acme")[0] for i in range(2))
    (b1,) = (WorkItem.objects.enqueue(Q, "b1", environment=env.id, group="globex")[0],)
    controls.write(Q, limits={"max_running_per_group": 1}, by="test")
    # Acked without a poll: the group's one slot goes to the first, the second is refused.
    assert WorkItem.objects.ack(env.id, a1.public_id).state == "starting"
    with pytest.raises(WorkConflict, match="group"):
        WorkItem.objects.ack(env.id, a2.public_id)
    # The poll skips the saturated group and hands out the other one.
    handed = WorkItem.objects.poll(env.id, worker_id="w").item
    assert handed is not None and handed.key == "b1"
    # A queue-wide override cap of 1 (the settings have none) now refuses even another group.
    controls.write(Q, limits={"max_running": 1}, clear=["max_running_per_group"], by="test")
    with pytest.raises(WorkConflict, match="max_running"):
        WorkItem.objects.ack(env.id, b1.public_id, worker_id="w")
    assert row(b1.public_id).state == "queued"
