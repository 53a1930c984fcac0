"""The watcher: one query per wake for every subscriber, latest-wins snapshots, terminal
snapshots always delivered, a bounded number of subscriptions, correct without NOTIFY."""

from __future__ import annotations

import threading
import time

import pytest
from django.db.backends.signals import connection_created
from django.db.models import F

import operations
from operations.exceptions import OperationNotFound, TooManyWatchers, WatcherClosed
from operations.models import Operation
from operations.watcher import GONE, Watcher
from tests.conftest import wait_until
from tests.operations.conftest import collect, in_thread, run_next

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def make_watcher():
    made: list[Watcher] = []

    def make(**options) -> Watcher:
        options.setdefault("poll", 60.0)  # no timer: only wakes read, unless a test says otherwise
        options.setdefault("min_read_interval", 0.0)
        watcher = Watcher(**options)
        made.append(watcher)
        return watcher

    yield make
    for watcher in made:
        watcher.close()
        if watcher._thread is not None:
            watcher._thread.join(5)


@pytest.fixture
def watcher_statements():
    """Count the statements the watcher's loop runs on its own connection."""
    executed: list[str] = []

    def count(execute, sql, params, many, context):
        executed.append(sql)
        return execute(sql, params, many, context)

    def on_connect(sender, connection, **kwargs):
        if threading.current_thread().name == "operations-watcher":
            connection.execute_wrappers.append(count)

    connection_created.connect(on_connect)
    yield executed
    connection_created.disconnect(on_connect)


def bump(ids, **changes):
    """Write to rows the way the runner does (revision + 1), without a NOTIFY."""
    Operation.objects.filter(pk__in=ids).update(revision=F("revision") + 1, **changes)


def wake_and_wait(watcher: Watcher) -> None:
    reads = watcher.reads
    watcher.wake.set()
    wait_until(lambda: watcher.reads > reads, timeout=10, message="the watcher to read")


def test_a_hundred_subscribers_cost_one_query_per_wake(make_watcher, watcher_statements):
    watcher = make_watcher()
    ids = [operations.start("test.ops.count", {}).id for _ in range(100)]
    subs = [watcher.watch(op_id) for op_id in ids]
    for sub in subs:
        assert sub.get(timeout=1).revision == 1  # the current snapshot comes with the subscription
    assert watcher.subscriptions() == 100
    bump(ids, count=5)
    wake_and_wait(watcher)
    snapshots = [sub.get(timeout=5) for sub in subs]
    assert [(s.revision, s.count) for s in snapshots] == [(2, 5)] * 100
    assert watcher.reads == 1
    assert len(watcher_statements) == 1 and "ANY" in watcher_statements[0]
    # A second wake with nothing changed still costs one statement, and delivers nothing.
    wake_and_wait(watcher)
    assert watcher.reads == 2 and len(watcher_statements) == 2
    assert all(sub.get(timeout=0) is None for sub in subs)


def test_a_slow_subscriber_gets_the_newest_snapshot_and_nothing_older(make_watcher):
    watcher = make_watcher()
    op = operations.start("test.ops.count", {})
    slow = watcher.watch(op.id)
    for n in range(1, 6):
        bump([op.id], count=n)
        wake_and_wait(watcher)
    latest = slow.get(timeout=1)
    assert (latest.revision, latest.count) == (6, 5)
    assert slow.get(timeout=0.1) is None  # one slot: the states in between are gone
    assert slow.delivered == 1


def test_subscribing_to_a_finished_operation_yields_its_terminal_snapshot_and_closes(make_watcher):
    watcher = make_watcher()
    op = operations.start("test.ops.count", {})
    operations.cancel(op.id)
    sub = watcher.watch(op.id)
    (snapshot,) = collect(sub, timeout=5)
    assert (snapshot.state, snapshot.done) == ("cancelled", True)
    assert sub.closed and watcher.subscriptions() == 0
    with pytest.raises(StopIteration):
        sub.get(timeout=0.1)
    assert watcher._thread is None  # nothing to follow: no loop was even started


def test_the_terminal_snapshot_is_delivered_even_to_a_subscriber_that_never_read(make_watcher):
    watcher = make_watcher()
    op = operations.start("test.ops.count", {})
    sub = watcher.watch(op.id)
    bump([op.id], count=1)
    wake_and_wait(watcher)
    operations.cancel(op.id)
    wake_and_wait(watcher)
    assert watcher.subscriptions() == 0  # followed no more once its end was read
    bump([op.id], count=99)  # written after the end: never delivered
    watcher.wake.set()
    snapshots = collect(sub, timeout=5)
    assert [(s.state, s.count) for s in snapshots] == [("cancelled", 1)]
    assert watcher.subscriptions() == 0


def test_the_subscription_limit_is_enforced_and_a_closed_subscription_frees_its_slot(make_watcher):
    watcher = make_watcher(max_subscriptions=3)
    ids = [operations.start("test.ops.count", {}).id for _ in range(4)]
    subs = [watcher.watch(op_id) for op_id in ids[:3]]
    with pytest.raises(TooManyWatchers, match="retry later"):
        watcher.watch(ids[3])
    assert watcher.subscriptions() == 3
    subs[0].close()
    assert watcher.subscriptions() == 2
    watcher.watch(ids[3])
    # A finished operation never takes a slot.
    operations.cancel(ids[0])
    (final,) = collect(watcher.watch(ids[0]), timeout=5)
    assert final.state == "cancelled"


def test_poll_only_without_notify_follows_a_run_to_its_end(make_watcher):
    watcher = make_watcher(channel="", poll=0.2, min_read_interval=0.05)
    op = operations.start("test.ops.tiers", {"units": 3, "per_unit": 10, "pause": 0.3})
    sub = watcher.watch(op.id)
    worker = in_thread(run_next)
    snapshots = collect(sub, timeout=30)
    worker.join(10)
    assert watcher._listen_token is None  # it never listened
    assert snapshots[0].state == "pending" and snapshots[-1].state == "succeeded"
    assert any(s.state == "running" for s in snapshots)
    revisions = [s.revision for s in snapshots]
    assert revisions == sorted(set(revisions))
    assert snapshots[-1].units_done == 3 and snapshots[-1].count == 30


def test_operations_watch_follows_a_run_from_this_process_to_its_end():
    from operations import watcher as watcher_module

    op = operations.start("test.ops.tiers", {"units": 2, "per_unit": 10, "pause": 0.2})
    try:
        with operations.watch(op.id) as sub:
            assert sub.op_id == op.id and sub._watcher is watcher_module.shared()
            worker = in_thread(run_next)
            snapshots = collect(sub, timeout=30)
            worker.join(10)
        assert snapshots[0].state == "pending" and snapshots[-1].state == "succeeded"
        assert [s.revision for s in snapshots] == sorted({s.revision for s in snapshots})
        with pytest.raises(OperationNotFound):
            operations.watch(op.id, owner="somebody else")
        with pytest.raises(OperationNotFound):
            operations.watch("op_missing")
    finally:
        watcher_module.shared().close()


def test_notify_wakes_the_watcher_long_before_its_poll(make_watcher):
    from operations.conf import ops_settings

    watcher = make_watcher(channel=ops_settings().notify_channel, poll=120.0)
    op = operations.start("test.ops.tiers", {"units": 2, "per_unit": 10, "pause": 0.2})
    sub = watcher.watch(op.id)
    worker = in_thread(run_next)
    # With a two-minute poll, only NOTIFY can bring these within the bound.
    snapshots = collect(sub, timeout=30)
    worker.join(10)
    assert snapshots[-1].state == "succeeded"
    assert any(s.state == "running" for s in snapshots)


def test_a_reaped_row_yields_gone_and_ends_the_stream(make_watcher):
    watcher = make_watcher()
    op = operations.start("test.ops.count", {})
    sub = watcher.watch(op.id)
    assert sub.get(timeout=1).state == "pending"
    Operation.objects.filter(pk=op.id).delete()
    wake_and_wait(watcher)
    assert sub.get(timeout=1) is GONE
    with pytest.raises(StopIteration):
        sub.get(timeout=0.1)
    assert watcher.subscriptions() == 0


def test_reads_are_floored_however_many_wakes_arrive(make_watcher):
    watcher = make_watcher(min_read_interval=0.5)
    op = operations.start("test.ops.count", {})
    watcher.watch(op.id)
    started = time.monotonic()
    for _ in range(100):
        watcher.wake.set()
        time.sleep(0.01)
    wait_until(lambda: watcher.reads >= 1, timeout=10, message="a first read")
    elapsed = time.monotonic() - started
    # A floor, not a speed: however slow this machine, 100 wakes cannot mean 100 reads.
    assert 1 <= watcher.reads <= elapsed / 0.5 + 2


def test_watch_refuses_unknown_and_other_owners_operations(make_watcher):
    watcher = make_watcher()
    op = operations.start("test.ops.count", {}, owner="7")
    with pytest.raises(OperationNotFound):
        watcher.watch("op_missing")
    with pytest.raises(OperationNotFound):
        watcher.watch(op.id, owner="8")
    assert watcher.watch(op.id, owner="7").get(timeout=1).id == op.id


def test_closing_the_watcher_ends_every_subscription(make_watcher):
    watcher = make_watcher()
    op = operations.start("test.ops.count", {})
    sub = watcher.watch(op.id)
    sub.get(timeout=1)
    watcher.close()
    with pytest.raises(StopIteration):
        sub.get(timeout=1)
    with pytest.raises(WatcherClosed):
        watcher.watch(op.id)
