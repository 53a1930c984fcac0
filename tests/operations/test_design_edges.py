"""Operations behaviours the design specifies, each proven: the configured RETRY_DELAY holds a
failed attempt back, and closing a watcher twice is harmless."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models.functions import Now

import operations
from operations import store
from operations.conf import ops_settings
from operations.exceptions import WatcherClosed
from operations.watcher import Watcher
from tests.conftest import statements_run
from tests.operations.conftest import items_for, op_row, run_next
from workqueue.models import WorkItem

pytestmark = pytest.mark.django_db(transaction=True)

RETRY_DELAY = 1234  # seconds: neither the default (30) nor the test settings' (0)


def seconds_until_ready(item_id: int) -> float:
    with connection.cursor() as cur:
        cur.execute("SELECT extract(epoch FROM run_after - now()) FROM work_items WHERE id = %s", [item_id])
        return float(cur.fetchone()[0])


def test_a_failed_attempt_is_held_back_by_the_configured_retry_delay(settings):
    settings.OPERATIONS = {**settings.OPERATIONS, "RETRY_DELAY": RETRY_DELAY}
    assert ops_settings().retry_delay == RETRY_DELAY
    op = operations.start("test.ops.fail", {})  # fails every attempt, retryable; no delay of its own
    run_next()
    failed = op_row(op.id)
    assert (failed.state, failed.attempts, failed.error.code) == ("pending", 1, "upstream_down")
    item = items_for(op.id).get()
    assert item.state == "queued"
    assert RETRY_DELAY - 60 < seconds_until_ready(item.id) <= RETRY_DELAY
    assert run_next() is None  # held back: nothing is ready
    assert op_row(op.id).attempts == 1

    WorkItem.objects.filter(pk=item.id).update(run_after=Now())  # the delay has passed
    assert run_next() is not None
    assert op_row(op.id).attempts == 2


def test_closing_a_watcher_twice_is_harmless_and_writes_nothing_the_second_time():
    watcher = Watcher(poll=60.0, min_read_interval=0.0, channel=ops_settings().notify_channel)
    op = operations.start("test.ops.count", {})
    sub = watcher.watch(op.id)
    assert sub.get(timeout=5).id == op.id
    with statements_run() as first:
        watcher.close()  # forgets what it followed: a write (a channel is configured)
    assert any(store.WATCHES_TABLE in text for text in first), first
    thread = watcher._thread
    with statements_run() as statements:
        watcher.close()  # a second close: no error, no statement
    assert statements == []
    if thread is not None:
        thread.join(5)
        assert not thread.is_alive()
    with pytest.raises(StopIteration):
        sub.get(timeout=1)
    with pytest.raises(WatcherClosed):
        watcher.watch(op.id)
    assert watcher.subscriptions() == 0
