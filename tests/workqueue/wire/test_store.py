"""The wire verbs on ``WorkItem.objects`` directly, without HTTP."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from tests.workqueue.wire.helpers import by_key, enqueue
from workqueue.exceptions import HeartbeatMismatch, InvalidInput, WorkConflict, WorkNotFound
from workqueue.models import WorkItem
from workqueue.wire.store import NO_HEARTBEAT, decode_cursor, encode_cursor

pytestmark = pytest.mark.django_db


def lapse(*keys: str) -> None:
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE work_items SET lease_expires_at = now() - interval '1 second' WHERE key = ANY(%s)", [list(keys)]
        )


def test_poll_finalizes_abandoned_stopping_items_a_bounded_batch_at_a_time(env, settings):
    settings.WORKQUEUE = {**settings.WORKQUEUE, "FINALIZE_BATCH": 2}
    enqueue(env, 3)
    WorkItem.objects.filter(key__startswith="sess_").update(state="stopping")
    lapse("sess_0", "sess_1", "sess_2")
    first = WorkItem.objects.poll(env.id)
    assert first.item is None and len(first.finalized) == 2
    second = WorkItem.objects.poll(env.id)
    assert len(second.finalized) == 1
    assert WorkItem.objects.stopped().filter(outcome="stopped", stopped_at__isnull=False).count() == 3


def test_the_list_cursor_survives_id_rotation(env):
    enqueue(env, 5)
    page, cursor = WorkItem.objects.list_page(env.id, limit=2)
    assert [i.key for i in page] == ["sess_4", "sess_3"]
    # Rotate every id: hand each item out, let the reservations lapse, hand them out again.
    for _ in range(5):
        WorkItem.objects.poll(env.id, reclaim_older_than_ms=1)
    lapse(*(f"sess_{i}" for i in range(5)))
    for _ in range(5):
        WorkItem.objects.poll(env.id)
    rest, cursor2 = WorkItem.objects.list_page(env.id, limit=2, page=cursor)
    assert [i.key for i in rest] == ["sess_2", "sess_1"]
    assert all(i.public_id != p.public_id for i in rest for p in page)
    last, end = WorkItem.objects.list_page(env.id, limit=2, page=cursor2)
    assert [i.key for i in last] == ["sess_0"] and end is None


def test_cursor_round_trip_and_rejection(env):
    (item,) = enqueue(env, 1)
    assert decode_cursor(encode_cursor(item)) == (item.created_at, item.id)
    for bad in ("", "%%%", "a" * 300, "bm9wZQ", "MjAyNXwx"):
        with pytest.raises(InvalidInput):
            decode_cursor(bad)


def test_refusals_change_nothing_and_say_why(env):
    enqueue(env, 1)
    handed = WorkItem.objects.poll(env.id).item
    with pytest.raises(HeartbeatMismatch) as caught:
        WorkItem.objects.heartbeat(env.id, handed.public_id, NO_HEARTBEAT)
    assert caught.value.current["state"] == "queued" and "NO_HEARTBEAT" in str(caught.value)
    WorkItem.objects.ack(env.id, handed.public_id)
    beat = WorkItem.objects.heartbeat(env.id, handed.public_id, NO_HEARTBEAT, 30)
    assert beat.lease_extended and beat.ttl_seconds == 30
    stopped = WorkItem.objects.stop(env.id, handed.public_id, force=True)
    with pytest.raises(WorkConflict):
        WorkItem.objects.stop(env.id, handed.public_id, force=True)
    with pytest.raises(WorkNotFound):
        WorkItem.objects.ack("env_other", handed.public_id)
    assert by_key("sess_0").stopped_at == stopped.stopped_at


def test_a_blocking_poll_refuses_to_wait_inside_a_transaction(env):
    with transaction.atomic(), pytest.raises(transaction.TransactionManagementError):
        WorkItem.objects.poll(env.id, block_ms=10)


@pytest.mark.parametrize("kwargs", [{"reclaim_older_than_ms": 0}, {"block_ms": 1000}, {"block_ms": True}])
def test_poll_checks_its_arguments(env, kwargs):
    with pytest.raises(InvalidInput):
        WorkItem.objects.poll(env.id, **kwargs)


def test_metadata_merge_is_atomic_per_statement(env):
    (item,) = enqueue(env, 1, metadata={"a": "1", "b": "2"})
    merged = WorkItem.objects.update_metadata(env.id, item.public_id, {"a": None, "c": "3"})
    assert merged.metadata == {"b": "2", "c": "3"}
    assert WorkItem.objects.update_metadata(env.id, item.public_id, {}).metadata == {"b": "2", "c": "3"}
