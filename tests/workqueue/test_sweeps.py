"""``recover`` and ``reap``: what they settle, delete and re-offer; one at a time; recorded."""

from __future__ import annotations

import datetime as dt
import json
import signal
import subprocess
import sys

import pytest
from django.db import connection
from django.db.models import F
from django.db.models.functions import Now

from tests.conftest import ROOT, wait_until
from tests.testapp.models import Sample
from tests.workqueue.conftest import row, side_connection
from workqueue.exceptions import LeaseLost
from workqueue.models import Environment, MaintenanceRun, Poller, QueueStart, Worker, WorkItem
from workqueue.sweeps import reap as reaper
from workqueue.sweeps import recover as recovery
from workqueue.testing import EnvironmentFactory
from workqueue.worker.lease import LeaseKeeper

pytestmark = pytest.mark.django_db(transaction=True)

AGO = dt.timedelta(seconds=1)
LONG_AGO = dt.timedelta(days=8)


def put(queue: str, key: str, environment=None, **fields) -> WorkItem:
    WorkItem.objects.enqueue(queue, key, environment=environment)
    WorkItem.objects.filter(queue=queue, key=key).update(**fields)
    return row(key, queue)


def snapshot() -> list[tuple]:
    return list(
        WorkItem.objects.order_by("id").values_list(
            "id", "public_id", "state", "outcome", "lease_token", "last_error", "stopped_at"
        )
    )


@pytest.fixture
def mess():
    """What crashes and time leave behind: one of each thing recover and reap deal with."""
    env = EnvironmentFactory(name="hosted")
    lapsed = Now() - AGO
    held = {"state": "active", "lease_token": "00000000-0000-0000-0000-000000000001", "started_at": Now()}
    # recover: stopping with a lapsed lease (finalized), and one still winding down.
    put("test.noop", "stopping-lapsed", state="stopping", lease_expires_at=lapsed)
    put("test.noop", "stopping-live", state="stopping", lease_expires_at=Now() + dt.timedelta(minutes=5))
    # recover: wire items whose heartbeat lease lapsed: re-offered, or failed when spent.
    put("test.wire", "wire-lapsed", env, **held, attempts=1, lease_expires_at=lapsed, handed_out=True)
    put("test.wire", "wire-spent", env, **held, attempts=3, lease_expires_at=lapsed, handed_out=True)
    put("test.wire", "wire-live", env, **held, attempts=1, lease_expires_at=Now() + dt.timedelta(minutes=5))
    # reap: old stopped items go, a recent one stays.
    for n in range(3):
        put("test.noop", f"old-{n}", state="stopped", outcome="succeeded", stopped_at=Now() - LONG_AGO)
    put("test.noop", "recent", state="stopped", outcome="succeeded", stopped_at=Now())
    # reap: a test.timeout item past its hard_timeout (1 s); a test.noop one has none.
    put("test.timeout", "overdue", **held, lease_expires_at=Now() + dt.timedelta(minutes=5))
    WorkItem.objects.filter(key="overdue").update(started_at=Now() - dt.timedelta(seconds=5))
    put("test.noop", "no-timeout", **held, lease_expires_at=Now() + dt.timedelta(minutes=5))
    WorkItem.objects.filter(key="no-timeout").update(started_at=Now() - dt.timedelta(days=2))
    Poller.objects.create(environment=env, worker_id="gone")
    Poller.objects.filter(worker_id="gone").update(last_seen=Now() - dt.timedelta(minutes=5))
    Poller.objects.create(environment=env, worker_id="here")
    Worker.objects.create(id="ancient", host="h", pid=1)
    Worker.objects.filter(id="ancient").update(last_seen=Now() - LONG_AGO)
    Worker.objects.create(id="recent", host="h", pid=2)
    MaintenanceRun.objects.create(name="reap", started_at=Now() - dt.timedelta(days=40), finished_at=Now())
    # reap: a rate-limiter start older than the longest period (an hour), and a recent one.
    QueueStart.objects.create(queue="test.rated", started_at=Now() - dt.timedelta(hours=2))
    QueueStart.objects.create(queue="test.rated", group_key="g", started_at=Now())
    return env


RECOVER = {"finalized": 1, "requeued": 1, "exhausted": 1, "rolled_up": 0}
REAP = {
    "rolled_up": 0,
    "stats_pruned": 0,
    "timed_out": 1,
    "deleted": 3,
    "pollers_pruned": 1,
    "workers_forgotten": 1,
    "runs_pruned": 1,
    "starts_pruned": 1,
}


def assert_recovered(before_ids: dict) -> None:
    assert row("stopping-lapsed").state == "stopped" and row("stopping-lapsed").outcome == "stopped"
    assert row("stopping-live").state == "stopping"
    lapsed = row("wire-lapsed")
    assert (lapsed.state, lapsed.lease_token, lapsed.acknowledged_at, lapsed.attempts) == ("queued", None, None, 1)
    assert lapsed.public_id != before_ids["wire-lapsed"], "a re-offered wire item gets a fresh public id"
    spent = row("wire-spent")
    assert (spent.state, spent.outcome, spent.public_id) == ("stopped", "failed", before_ids["wire-spent"])
    assert spent.last_error == (
        "lease lapsed on attempt 3 of 3 (the holder died or stalled); attempts are spent, so it is not retried"
    )
    assert row("wire-live").state == "active"


def assert_reaped() -> None:
    assert not WorkItem.objects.filter(key__startswith="old-").exists()
    assert WorkItem.objects.filter(key="recent").exists()
    overdue = row("overdue")
    assert (overdue.state, overdue.outcome, overdue.lease_token) == ("stopped", "failed", None)
    assert overdue.last_error.startswith("hard timeout")
    assert row("no-timeout").state == "active"
    assert list(Poller.objects.values_list("worker_id", flat=True)) == ["here"]
    assert list(Worker.objects.values_list("id", flat=True)) == ["recent"]
    assert list(QueueStart.objects.values_list("group_key", flat=True)) == ["g"]


def blocked_on_the_runs_table() -> bool:
    # Asked from Django's own (autocommit) connection: pg_stat_activity is a snapshot per
    # transaction, so the lock holder's transaction would never see the waiter arrive.
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query ILIKE '%%work_maintenance_runs%%'"
        )
        return cur.fetchone()[0] > 0


def counts(out: str) -> dict:
    lines = out.strip().splitlines()
    assert len(lines) == 1, out
    return json.loads(lines[0])


def test_dry_run_counts_everything_and_changes_nothing(mess, run_command):
    before = snapshot()
    for name, expected in (("recover", RECOVER), ("reap", REAP)):
        done = run_command(name, "--dry-run", "--json")
        assert done.returncode == 0, done.stderr
        result = counts(done.stdout)
        assert result["dry_run"] is True and result["skipped"] is False
        assert expected.items() <= result["counts"].items()
    assert snapshot() == before
    assert Poller.objects.count() == 2 and Worker.objects.count() == 2
    assert MaintenanceRun.objects.count() == 1  # the old record is still there; dry runs record nothing
    text = run_command("recover", "--dry-run")
    assert text.stdout.startswith("recover (dry run): finalized=1 requeued=1 exhausted=1")


@pytest.mark.parametrize(("name", "expected"), [("recover", RECOVER), ("reap", REAP)])
def test_two_concurrent_runs_one_works_the_other_skips_and_each_run_is_recorded(
    name, expected, mess, subprocess_env, run_command
):
    before_ids = dict(WorkItem.objects.values_list("key", "public_id"))
    cmd = [sys.executable, str(ROOT / "manage.py"), name, "--json"]
    with side_connection(autocommit=False) as other:
        # A third connection makes the first run slow: it takes the sweep lock, then waits
        # to record itself while the second run starts.
        other.execute("LOCK TABLE work_maintenance_runs IN EXCLUSIVE MODE")
        first = subprocess.Popen(cmd, cwd=ROOT, env=subprocess_env, stdout=subprocess.PIPE, text=True)
        try:
            wait_until(blocked_on_the_runs_table, timeout=20, message=f"the first {name} to hold the sweep lock")
            second = run_command(name, "--json")
            assert second.returncode == 0, second.stderr
            assert counts(second.stdout) == {
                "sweep": name,
                "skipped": True,
                "dry_run": False,
                "counts": {},
                "seconds": 0,
            }
            other.rollback()
            out, _ = first.communicate(timeout=30)
        finally:
            if first.poll() is None:
                first.kill()
    assert first.returncode == 0
    result = counts(out)
    assert result["skipped"] is False and expected.items() <= result["counts"].items()
    (assert_recovered if name == "recover" else assert_reaped)(*([before_ids] if name == "recover" else []))

    (run,) = MaintenanceRun.objects.filter(name=name)
    assert run.ok and run.finished_at is not None and run.counts == result["counts"]

    # Idempotent: a second run finds nothing left to do, and is recorded too.
    again = run_command(name)
    assert again.returncode == 0 and again.stdout.startswith(f"{name}: ")
    assert f"{next(iter(expected))}=0" in again.stdout
    assert MaintenanceRun.objects.filter(name=name).count() == 2
    assert MaintenanceRun.objects.filter(name=name).order_by("-started_at").first().counts[next(iter(expected))] == 0


def test_a_held_sweep_lock_makes_the_command_say_it_skipped(mess, run_command):
    with side_connection() as other:
        other.execute("SELECT pg_advisory_lock(hashtextextended('workqueue.sweep.reap', 0))")
        done = run_command("reap")
    assert done.returncode == 0
    assert done.stdout.strip() == "reap: skipped, another reap is running"
    assert WorkItem.objects.filter(key__startswith="old-").count() == 3


def test_reap_deletes_only_stopped_items_past_retention_and_no_live_item_however_old():
    # What makes a row reapable is its state: every row here has each of its timestamps long
    # past the retention (stopped_at too), so nothing but the state can tell them apart.
    env = EnvironmentFactory(name="hosted")
    ancient = Now() - LONG_AGO
    old = {"created_at": ancient, "stopped_at": ancient, "started_at": ancient}
    token = "00000000-0000-0000-0000-000000000001"
    put("test.noop", "queued", **old, run_after=ancient)
    put("test.noop", "scheduled", **old, run_after=Now() + dt.timedelta(days=1))
    put("test.noop", "held", **old, state="active", lease_token=token, lease_expires_at=Now() + dt.timedelta(minutes=5))
    put("test.noop", "held-lapsed", **old, state="active", lease_token=token, lease_expires_at=ancient)
    put("test.noop", "stopping", **old, state="stopping", lease_token=token, lease_expires_at=ancient)
    put("test.wire", "starting", env, **old, state="starting", lease_token=token, lease_expires_at=ancient)
    put("test.noop", "stopped-old", **old, state="stopped", outcome="failed")
    put("test.noop", "stopped-recent", created_at=ancient, state="stopped", outcome="succeeded", stopped_at=Now())
    before = {key: row(key).state for key in WorkItem.objects.values_list("key", flat=True)}
    assert reaper.reap()["deleted"] == 1
    after = dict(WorkItem.objects.values_list("key", "state"))
    assert "stopped-old" not in after
    assert after == {key: state for key, state in before.items() if key != "stopped-old"}


def test_hard_timeout_fails_the_item_clears_the_proof_and_tells_the_holder():
    WorkItem.objects.enqueue("test.timeout", "slow")
    WorkItem.objects.enqueue("test.noop", "endless")
    slow = WorkItem.objects.claim(["test.timeout"], limit=1, worker_id="w").items[0]
    endless = WorkItem.objects.claim(["test.noop"], limit=1, worker_id="w").items[0]
    WorkItem.objects.filter(pk=endless.id).update(started_at=Now() - dt.timedelta(days=30))
    keeper = LeaseKeeper(tick=0.05)
    try:
        hold = keeper.hold(slow, lease=1.5)
        assert reaper.fail_hard_timeouts() == 0, "not yet: it started less than hard_timeout ago"
        WorkItem.objects.filter(pk=slow.id).update(started_at=F("started_at") - dt.timedelta(seconds=2))
        assert reaper.fail_hard_timeouts() == 1
        assert hold.cancelled.wait(3) and hold.reason == "timeout"
    finally:
        keeper.close()
    item = row("slow")
    assert (item.state, item.outcome, item.lease_token, item.lease_expires_at) == ("stopped", "failed", None, None)
    assert item.last_error == "hard timeout: held longer than 1 s"
    with pytest.raises(LeaseLost):
        WorkItem.objects.extend(slow)
    with pytest.raises(LeaseLost):
        WorkItem.objects.complete(slow)
    # hard_timeout None: never by wall clock alone.
    assert row("endless").state == "active"
    assert reaper.fail_hard_timeouts() == 0


def test_a_worker_running_its_own_maintenance_times_out_its_item_and_stops_the_handler(make_worker_ready):
    WorkItem.objects.enqueue("test.timeout", "overrun", metadata={"seconds": "30"})
    proc = make_worker_ready("reaper", "--queue", "test.timeout", "--maintenance", "0.3")
    wait_until(lambda: row("overrun").state == "stopped", timeout=20, message="the hard timeout")
    wait_until(lambda: Sample.objects.filter(name="cancelled:overrun").exists(), timeout=10, message="the cancel")
    item = row("overrun")
    assert (item.outcome, item.attempts) == ("failed", 1)
    assert item.last_error.startswith("hard timeout")
    assert MaintenanceRun.objects.filter(name="reap", counts__timed_out=1).exists()
    proc.signal(signal.SIGTERM)
    assert proc.wait(20) == 0


def test_recover_and_reap_functions_take_a_pinned_clock(mess):
    # With "now" pinned an hour back, nothing has lapsed or aged enough yet.
    earlier = Environment.objects.values_list("created_at", flat=True).get() - dt.timedelta(hours=1)
    assert recovery.finalize_stopping(now=earlier) == 0
    assert recovery.requeue_lapsed(now=earlier) == (0, 0)
    assert reaper.fail_hard_timeouts(now=earlier) == 0
    assert reaper.delete_stopped(now=earlier - LONG_AGO) == 0
