"""Operations under real ``manage.py runworker`` processes: progress, SIGKILL, SIGTERM."""

from __future__ import annotations

import datetime as dt
import signal

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client

import operations
from operations.conf import ops_settings
from operations.watcher import Watcher
from tests.conftest import wait_until
from tests.operations.conftest import collect, items_for, op_row, wait_for_state
from tests.testapp.models import OperationRun

pytestmark = pytest.mark.django_db(transaction=True)


def db_now() -> dt.datetime:
    with connection.cursor() as cur:
        cur.execute("SELECT clock_timestamp()")
        return cur.fetchone()[0]


def runs(op_id: str, event: str = "began") -> list[tuple[int, bool, int]]:
    return list(
        OperationRun.objects.filter(op_id=op_id, event=event).order_by("id").values_list("attempt", "final", "pid")
    )


def test_both_progress_tiers_end_to_end_under_runworker(ops_worker):
    user = get_user_model().objects.create_user("ada")
    client = Client()
    client.force_login(user)
    worker = ops_worker("tiers")
    watcher = Watcher(poll=0.3, min_read_interval=0.05, channel=ops_settings().notify_channel)
    try:
        op = operations.start("test.ops.tiers", {"units": 3, "per_unit": 100, "pause": 0.4}, owner=str(user.pk))
        counted = operations.start("test.ops.count", {"steps": 4, "per_step": 250, "pause": 0.3}, owner=str(user.pk))
        tiers_sub, count_sub = watcher.watch(op.id), watcher.watch(counted.id)
        snapshots, following = collect(tiers_sub), collect(count_sub)
    finally:
        watcher.close()
    # What a watcher saw while it ran: units and the count only ever move forward, and the
    # count does not start again at a unit boundary.
    mid_run = [s for s in snapshots if s.state == "running"]
    assert mid_run, "no running snapshot was seen"
    assert any(s.unit and s.units_total == 3 for s in mid_run)
    assert any(0 < s.units_done < 3 for s in mid_run)
    counts = [s.count for s in snapshots]
    assert counts == sorted(counts)
    assert [s.units_done for s in snapshots] == sorted(s.units_done for s in snapshots)
    # Each unit advances 100 before it finishes, so a count that started again at a unit
    # boundary would fall below 100 × units done in a snapshot taken after the first unit.
    assert all(s.count >= 100 * s.units_done for s in snapshots)
    final = snapshots[-1]
    assert final.state == "succeeded" and final.done
    # The row.
    row = op_row(op.id)
    assert (row.units_total, row.units_done, row.count, row.unit, row.attempts) == (3, 3, 300, "", 1)
    assert row.progress.fraction() == 1.0 and row.worker_id == "tiers"
    # The HTTP JSON.
    body = client.get(f"/api/operations/{op.id}").json()
    assert body["state"] == "succeeded" and body["done"] is True
    assert body["progress"] == {
        "unitsTotal": 3,
        "unitsDone": 3,
        "unit": "",
        "message": "working on unit 3 of 3",
        "countLabel": "rows",
        "count": 300,
    }
    assert body["result"] == {"uri": f"memory://tiers/{op.id}", "detail": {"units": 3}}
    # The count tier alone: no total, so no fraction, and the JSON says null rather than 0.
    assert [s.units_total for s in following] == [None] * len(following)
    assert [s.count for s in following] == sorted(s.count for s in following)
    counted_row = op_row(counted.id)
    assert (counted_row.state, counted_row.count, counted_row.progress.fraction()) == ("succeeded", 1000, None)
    counted_body = client.get(f"/api/operations/{counted.id}").json()
    assert counted_body["progress"]["unitsTotal"] is None and counted_body["progress"]["count"] == 1000
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0


def test_a_sigkilled_worker_loses_the_operation_to_another_after_the_lease_lapses(ops_worker):
    first = ops_worker("first")
    op = operations.start("test.ops.takeover", {})
    wait_until(lambda: runs(op.id), message="the first attempt to begin")
    first_lease = op_row(op.id).claimed_until
    second = ops_worker("second")
    # While the first worker reports progress its one lease keeps moving out, so the second
    # worker, polling all along, never gets a claim in: well past the lease begin gave it, by
    # the database's clock.
    wait_until(lambda: db_now() > first_lease + dt.timedelta(seconds=1), timeout=30, message="the first lease")
    assert runs(op.id) == [(1, False, first.pid)]
    row = op_row(op.id)
    assert (row.state, row.attempts, row.worker_id) == ("running", 1, "first")
    item = items_for(op.id).get()
    assert (item.claimed_by, item.attempts) == ("first", 1)
    # One lease: read both expiries in one statement (a flush between two reads moves both).
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT o.claimed_until, w.lease_expires_at FROM {type(row)._meta.db_table} o "
            f"JOIN {type(item)._meta.db_table} w ON w.id = %s WHERE o.id = %s",
            [item.pk, op.id],
        )
        op_lease, item_lease = cur.fetchone()
    assert item_lease == op_lease

    first.kill()
    assert first.proc.returncode == -signal.SIGKILL
    done = wait_for_state(op.id, "succeeded", "failed", timeout=30)
    assert done.state == "succeeded", (done.error, second.output()[-3000:])
    # Attempt 2 ran in the second process and was told it was the last allowed one.
    assert runs(op.id) == [(1, False, first.pid), (2, True, second.pid)]
    assert runs(op.id, "returned") == [(2, True, second.pid)]
    assert (done.attempts, done.worker_id, done.result.detail) == (2, "second", {"attempt": 2})
    assert [e["worker_id"] for e in done.attempt_log] == ["first", "second"]
    assert "finished_at" not in done.attempt_log[0]  # the killed attempt never ended
    assert done.attempt_log[1]["outcome"] == "succeeded"
    item = items_for(op.id).get()
    assert (item.state, item.outcome, item.attempts, item.reclaimed) == ("stopped", "succeeded", 2, True)
    second.signal(signal.SIGTERM)
    assert second.wait(20) == 0


def test_sigterm_during_a_long_operation_releases_it_instead_of_failing_it(ops_worker):
    leaving = ops_worker("leaving", "--grace", "0.5")
    op = operations.start("test.ops.hold", {"seconds": 60})
    wait_until(lambda: runs(op.id), message="the run to begin")
    leaving.signal(signal.SIGTERM)
    assert leaving.wait(20) == 0
    released = op_row(op.id)
    assert (released.state, released.attempts, released.done) == ("pending", 0, False)
    assert released.claimed_until is None and released.lease_token is None and released.error is None
    assert released.attempt_log[-1]["outcome"] == "released"
    item = items_for(op.id).get()
    assert (item.state, item.attempts) == ("queued", 0)
    assert "released 1 item(s)" in leaving.output()

    # Another worker picks it up at once, as attempt 1 again (the attempt was refunded).
    staying = ops_worker("staying")
    wait_until(lambda: len(runs(op.id)) == 2, message="the next worker to begin")
    assert [(a, f) for a, f, _pid in runs(op.id)] == [(1, False), (1, False)]
    operations.cancel(op.id)
    done = wait_for_state(op.id, "cancelled", "succeeded", "failed")
    assert (done.state, done.attempts) == ("cancelled", 1)
    staying.signal(signal.SIGTERM)
    assert staying.wait(20) == 0
