"""``manage.py runworker`` as a real process: crashes, signals, wake-ups, outages, failures."""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest
from django.db import connection

from tests.conftest import wait_until
from tests.testapp.models import Completion, Sample
from tests.workqueue.conftest import listening_backends, load_item, row, terminate_other_backends
from workqueue.exceptions import LeaseLost
from workqueue.models import WorkItem

pytestmark = pytest.mark.django_db(transaction=True)


def held_by(key: str, worker_id: str) -> bool:
    return WorkItem.objects.filter(key=key, state="active", claimed_by=worker_id).exists()


def running(key: str, worker_id: str) -> bool:
    """Its handler has started (a claimed item may still wait in the worker's run queue)."""
    return held_by(key, worker_id) and Sample.objects.filter(name=f"started:{key}").exists()


def claim_passes_done() -> bool:
    """Whether a session on the test database is idle after a claim.

    In a starting worker that is its main loop after its first claim pass: the heartbeat before
    it is another statement, and the claim is either its own statement (item_claim, WITH q AS
    ...) or, where a hook watches the queue, a transaction ending in COMMIT.
    """
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND state = 'idle' AND (query = 'COMMIT' OR query LIKE 'WITH q AS (%%')"
        )
        return cur.fetchone()[0] > 0


def test_a_sigkilled_holder_loses_the_item_to_another_worker_and_its_proof_is_refused(make_worker_ready):
    WorkItem.objects.enqueue("test.holdonce", "victim")
    doomed = make_worker_ready("doomed", "--queue", "test.holdonce")
    wait_until(lambda: held_by("victim", "doomed"), timeout=20, message="the first worker to hold the item")
    dead = load_item(row("victim").id)
    assert dead.lease_token is not None and dead.attempts == 1
    doomed.kill()
    assert doomed.proc.returncode == -signal.SIGKILL

    heir = make_worker_ready("heir", "--queue", "test.holdonce")
    wait_until(lambda: Completion.objects.filter(key="victim").exists(), timeout=20, message="the reclaim")
    (done,) = Completion.objects.filter(key="victim")
    assert (done.worker_id, done.attempt, done.reclaimed) == ("heir", 2, True)
    item = row("victim")
    assert (item.state, item.outcome, item.attempts, item.reclaimed) == ("stopped", "succeeded", 2, True)

    # The dead holder's proof is refused everywhere, and changes nothing.
    for write in (
        lambda: WorkItem.objects.complete(dead),
        lambda: WorkItem.objects.extend(dead, 60),
        lambda: WorkItem.objects.fail(dead, "zombie"),
    ):
        with pytest.raises(LeaseLost):
            write()
    after = row("victim")
    assert (after.state, after.outcome, after.last_error) == ("stopped", "succeeded", "")
    heir.signal(signal.SIGTERM)
    assert heir.wait(20) == 0


def test_a_poison_item_that_kills_its_worker_every_time_is_failed_once_its_attempts_are_spent(start_worker):
    WorkItem.objects.enqueue("test.crash", "poison")
    assert row("poison").max_attempts == 2
    deaths = 0
    survivor = None
    deadline = time.monotonic() + 120
    # A supervisor's job: start a worker again whenever one dies.
    while WorkItem.objects.filter(key="poison").unsettled().exists():
        assert time.monotonic() < deadline, "the poison item was never settled"
        if survivor is None or not survivor.alive():
            if survivor is not None:
                assert survivor.proc.returncode == -signal.SIGKILL, survivor.output()[-2000:]
                deaths += 1
            survivor = start_worker("--queue", "test.crash", "--worker-id", f"crash-{deaths}")
        time.sleep(0.05)
    item = row("poison")
    assert (item.state, item.outcome, item.attempts) == ("stopped", "failed", 2)
    assert item.last_error == (
        "lease lapsed on attempt 2 of 2 (the holder died or stalled); attempts are spent, so it is not retried"
    )
    assert deaths == 2
    assert not Completion.objects.exists()
    # The last worker settled it rather than running it again: it says so, and is alive and well.
    wait_until(lambda: "spent its 2 attempts" in survivor.output(), timeout=10, message="the settling worker's line")
    assert survivor.alive(), survivor.output()[-2000:]
    survivor.signal(signal.SIGTERM)
    assert survivor.wait(20) == 0


@pytest.mark.direct_db(
    reason="waits for the worker's own session to go idle (pg_stat_activity); a pooler's are its own"
)
def test_an_idle_worker_wakes_on_notify_long_before_its_backstop_poll(make_worker_ready):
    proc = make_worker_ready("sleeper", "--queue", "test.record", "--poll", "30")
    wait_until(listening_backends, timeout=10, message="the worker's LISTEN connection")
    # Its first claim pass found nothing (an item enqueued before it would be claimed without a
    # NOTIFY); from then on it waits on NOTIFY or 30 s.
    wait_until(claim_passes_done, timeout=10, message="the worker's first claim pass")
    started = time.monotonic()
    WorkItem.objects.enqueue("test.record", "wake-up")
    wait_until(lambda: Completion.objects.filter(key="wake-up").exists(), timeout=25, message="the wake-up")
    assert time.monotonic() - started < 10
    proc.signal(signal.SIGTERM)
    assert proc.wait(20) == 0


def test_sigterm_during_a_short_item_lets_it_finish_and_exits_0(make_worker_ready):
    proc = make_worker_ready("graceful", "--queue", "test.short", "--grace", "10")
    WorkItem.objects.enqueue("test.short", "short", metadata={"seconds": "1.5"})
    wait_until(lambda: running("short", "graceful"), timeout=20, message="the item to start")
    proc.signal(signal.SIGTERM)
    assert proc.wait(20) == 0, proc.output()[-2000:]
    item = row("short")
    assert (item.state, item.outcome, item.attempts) == ("stopped", "succeeded", 1)
    assert Completion.objects.filter(key="short").count() == 1
    assert "SIGTERM received" in proc.output()


def test_sigterm_during_a_long_item_releases_it_after_the_grace_period_and_exits_0(make_worker_ready):
    proc = make_worker_ready("impatient", "--queue", "test.short", "--grace", "1")
    WorkItem.objects.enqueue("test.short", "long", metadata={"seconds": "60"})
    wait_until(lambda: running("long", "impatient"), timeout=20, message="the item to start")
    signalled = time.monotonic()
    proc.signal(signal.SIGTERM)
    assert proc.wait(20) == 0, proc.output()[-2000:]
    assert time.monotonic() - signalled >= 1.0, proc.output()[-3000:]
    item = row("long")
    assert (item.state, item.attempts, item.lease_token, item.lease_expires_at) == ("queued", 0, None, None)
    assert not Completion.objects.filter(key="long").exists()
    assert "releasing 1 running item" in proc.output()


def test_a_second_signal_exits_at_once(make_worker_ready):
    proc = make_worker_ready("twice", "--queue", "test.short", "--grace", "60")
    WorkItem.objects.enqueue("test.short", "long", metadata={"seconds": "60"})
    wait_until(lambda: running("long", "twice"), timeout=20, message="the item to start")
    proc.signal(signal.SIGTERM)
    wait_until(lambda: "SIGTERM received" in proc.output(), timeout=10, message="the first signal")
    signalled = time.monotonic()
    proc.signal(signal.SIGINT)
    code = proc.wait(10)
    assert code != 0 and time.monotonic() - signalled < 5
    assert "second signal" in proc.output()
    assert row("long").state == "active", "an immediate exit leaves the lease to lapse"


def test_a_worker_rides_out_killed_connections_and_finishes_the_queue(make_worker_ready):
    keys = [f"k{i}" for i in range(150)]
    WorkItem.objects.enqueue_many([{"queue": "test.flaky", "key": k, "metadata": {"seconds": "0.02"}} for k in keys])
    # Plain runworker, as a site runs it: every registered queue, async def ones included.
    proc = make_worker_ready("survivor", "--concurrency", "2", "--batch", "4", "--poll", "30")
    wait_until(lambda: Completion.objects.count() >= 20, timeout=20, message="the worker to get going")
    listeners_before = listening_backends()
    assert listeners_before
    assert WorkItem.objects.live().count() > 20, "the outage must hit a worker in mid-run"
    killed = terminate_other_backends()
    assert killed
    wait_until(lambda: not WorkItem.objects.live().exists(), timeout=60, message="the queue to be finished")
    per_key = Counter(Completion.objects.values_list("key", flat=True))
    assert set(per_key) == set(keys) and max(per_key.values()) == 1
    assert WorkItem.objects.succeeded().count() == len(keys)
    assert proc.alive()
    out = proc.output()
    assert "listener connection lost" in out and "listener reconnected" in out, out[-3000:]

    # The new LISTEN connection works: with a 30 s backstop, a new item is picked up at once.
    wait_until(lambda: listening_backends() - listeners_before, timeout=10, message="a new LISTEN connection")
    started = time.monotonic()
    WorkItem.objects.enqueue("test.flaky", "after-outage")
    wait_until(lambda: Completion.objects.filter(key="after-outage").exists(), timeout=25, message="the wake-up")
    assert time.monotonic() - started < 10
    proc.signal(signal.SIGTERM)
    assert proc.wait(20) == 0, proc.output()[-3000:]


def test_one_handler_exception_fails_that_item_only_and_retries_until_max_attempts(make_worker_ready):
    WorkItem.objects.enqueue("test.fail", "bad")
    WorkItem.objects.enqueue_many([("test.noop", f"ok{i}") for i in range(9)])
    proc = make_worker_ready(
        "mixed", "--queue", "test.fail", "--queue", "test.noop", "--batch", "10", "--concurrency", "2"
    )
    wait_until(lambda: not WorkItem.objects.unsettled().exists(), timeout=30, message="every item to be settled")
    assert WorkItem.objects.filter(queue="test.noop").succeeded().count() == 9
    bad = row("bad")
    assert (bad.state, bad.outcome, bad.attempts) == ("stopped", "failed", 3)
    assert bad.last_error.startswith("builtins.RuntimeError: test.fail attempt 3")
    assert proc.alive()
    proc.signal(signal.SIGTERM)
    assert proc.wait(20) == 0
    assert proc.output().count("handler raised RuntimeError") == 3


def test_a_stalled_handler_is_cancelled_and_its_item_becomes_reclaimable(make_worker_ready):
    # progress=reclaimed: the first attempt never reports progress; the reclaimed one does.
    WorkItem.objects.enqueue("test.stall", "stuck", metadata={"seconds": "2", "progress": "reclaimed"})
    proc = make_worker_ready("staller", "--queue", "test.stall")
    wait_until(lambda: Sample.objects.filter(name="cancelled:stuck").exists(), timeout=20, message="the stall cancel")
    wait_until(lambda: Completion.objects.filter(key="stuck").exists(), timeout=20, message="the reclaim")
    (done,) = Completion.objects.filter(key="stuck")
    assert (done.attempt, done.reclaimed) == (2, True)
    assert row("stuck").outcome == "succeeded"
    assert "stalled" in proc.output()
    proc.signal(signal.SIGTERM)
    assert proc.wait(20) == 0
