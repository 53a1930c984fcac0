"""The lease keeper, in-process: renewals on its own thread and connection, lost leases, stalls."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest
from django.db import connection
from django.db.models.functions import Now
from django.db.utils import OperationalError

from tests.conftest import wait_until
from tests.workqueue.conftest import row, side_connection
from workqueue.exceptions import LeaseLost
from workqueue.models import WorkItem
from workqueue.worker.lease import LeaseKeeper

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def keeper():
    keeper = LeaseKeeper(tick=0.05)
    yield keeper
    keeper.close()


def db_now() -> dt.datetime:
    with connection.cursor() as cur:
        cur.execute("SELECT clock_timestamp()")
        return cur.fetchone()[0]


def claim(keys, lease=1.5, worker="w1"):
    WorkItem.objects.enqueue_many([("test.short", k) for k in keys])
    items = WorkItem.objects.claim(["test.short"], limit=len(keys), worker_id=worker, lease=lease).items
    assert len(items) == len(keys)
    return sorted(items, key=lambda i: i.key)


def test_the_keeper_renews_the_lease_and_keeps_the_proof(keeper):
    (item,) = claim(["k"])
    first_expiry, token = item.lease_expires_at, item.lease_token
    hold = keeper.hold(item, lease=1.5)
    wait_until(lambda: row("k").lease_expires_at > first_expiry, timeout=5, message="a renewal")
    # Past the first lease by the database's clock (the one that decides leases): only renewals keep it.
    wait_until(lambda: db_now() > first_expiry + dt.timedelta(seconds=0.3), timeout=10, message="the first lease")
    fresh = row("k")
    assert fresh.lease_token == token and fresh.state == "active"
    assert fresh.lease_expires_at > first_expiry + dt.timedelta(seconds=1)
    assert not WorkItem.objects.lapsed().exists()
    assert WorkItem.objects.claim(["test.short"], limit=1, worker_id="thief").items == []
    assert not hold.cancelled.is_set() and keeper.renewals >= 3
    keeper.drop(hold)
    assert keeper.close() is None


def test_a_lost_lease_cancels_the_holder_and_is_reported_by_close(keeper):
    (item,) = claim(["k"])
    hold = keeper.hold(item, lease=1.5)
    WorkItem.objects.filter(pk=item.id).update(lease_expires_at=Now() - dt.timedelta(seconds=1))
    (theirs,) = WorkItem.objects.claim(["test.short"], limit=1, worker_id="thief").items
    assert hold.cancelled.wait(3), "the holder was not told"
    assert hold.reason == "lease_lost"
    assert keeper.holds() == []
    # The keeper never touched the new holder's lease.
    assert row("k").lease_token == theirs.lease_token and row("k").lease_expires_at == theirs.lease_expires_at
    assert isinstance(keeper.close(), LeaseLost)


def test_a_stalled_holder_is_cancelled_and_its_lease_left_to_lapse(keeper):
    stalled, busy = claim(["a-stalled", "b-busy"])
    hold = keeper.hold(stalled, lease=1.5, stall=0.3)
    working = keeper.hold(busy, lease=1.5, stall=0.3)
    done = threading.Event()

    def report_progress():
        while not done.wait(0.05):
            working.progress()

    reporter = threading.Thread(target=report_progress, daemon=True)
    reporter.start()
    try:
        assert hold.cancelled.wait(3) and hold.reason == "stalled"
        assert [h.item.key for h in keeper.holds()] == ["b-busy"]
        # Renewal stopped: the item lapses and another claimer reclaims it.
        wait_until(lambda: WorkItem.objects.lapsed().filter(key="a-stalled").exists(), timeout=5, message="a lapse")
        assert row("b-busy").lease_expires_at > row("a-stalled").lease_expires_at
        (reclaimed,) = WorkItem.objects.claim(["test.short"], limit=5, worker_id="heir").items
        assert reclaimed.key == "a-stalled" and reclaimed.reclaimed and reclaimed.attempts == 2
        assert not working.cancelled.is_set(), "a holder that reports progress is not stalled"
    finally:
        done.set()
        reporter.join()


def test_one_locked_row_does_not_cost_the_other_items_their_leases(keeper):
    locked, free = claim(["a-locked", "b-free"])
    first_expiry = free.lease_expires_at
    with side_connection(autocommit=False) as other:
        other.execute("SELECT 1 FROM work_items WHERE id = %s FOR UPDATE", [locked.id])
        hold_locked = keeper.hold(locked, lease=1.5)
        hold_free = keeper.hold(free, lease=1.5)
        # Never renewed, the locked item's lease runs out, and the database's clock passes the
        # free item's first lease too.
        assert hold_locked.cancelled.wait(10), "the locked item's holder was not told"
        wait_until(lambda: db_now() > first_expiry + dt.timedelta(seconds=0.3), timeout=10, message="the first lease")
        assert not hold_free.cancelled.is_set(), hold_free.reason
        assert row("b-free").lease_expires_at > first_expiry + dt.timedelta(seconds=0.5)
        # Never renewed, the locked item's lease ran out: its holder is told.
        assert hold_locked.cancelled.is_set() and hold_locked.reason == "lease_lost"
        other.rollback()


def test_a_renewal_is_bounded_by_the_lease_left_so_a_stalled_database_cannot_hang_the_holder(keeper):
    (item,) = claim(["k"])
    with side_connection(autocommit=False) as other:
        other.execute("LOCK TABLE work_items IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        hold = keeper.hold(item, lease=1.5)
        assert hold.cancelled.wait(4), "the renewal hung past the lease"
        assert time.monotonic() - started < 4
        assert hold.reason == "lease_lost"
        other.rollback()
    failure = keeper.close()
    assert isinstance(failure, OperationalError) and "statement timeout" in str(failure)


def test_drop_many_stops_renewing_the_holds_it_names_and_keeps_renewing_the_others(keeper):
    dropped, kept = claim(["a", "b"])
    holds = keeper.hold_many([dropped, kept], lease=1.5)
    keeper.drop_many([holds[0]])
    assert keeper.holds() == [holds[1]]
    before = {k: row(k).lease_expires_at for k in ("a", "b")}
    wait_until(lambda: row("b").lease_expires_at > before["b"], timeout=5, message="a renewal of the kept hold")
    wait_until(lambda: db_now() > before["a"] + dt.timedelta(seconds=0.2), timeout=10, message="the dropped lease")
    assert row("a").lease_expires_at == before["a"]  # never renewed: it lapses
    assert [i.key for i in WorkItem.objects.lapsed()] == ["a"]
