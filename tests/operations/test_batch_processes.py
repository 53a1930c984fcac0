"""Batches and chains under real ``manage.py runworker`` processes (SIGKILL included), and
``manage.py recover`` / ``manage.py reap`` run as commands (operations.batches)."""

from __future__ import annotations

import datetime as dt
import random
import time

import pytest
from django.db import connection

import operations
from operations import store
from operations.models import Operation
from tests.conftest import wait_until
from tests.operations.conftest import begin, op_row, reporter_for, run_next, spawn_ops_worker, wait_for_state
from tests.testapp.models import OperationRun
from workqueue.models import WorkItem

pytestmark = pytest.mark.django_db(transaction=True)


def callbacks(batch_id: str) -> list[Operation]:
    """The operations a parent's end started (its then): there must be exactly one."""
    return list(Operation.objects.filter(follows_id=batch_id))


def children(parent_id: str) -> list[Operation]:
    return list(Operation.objects.children_of(parent_id))


def assert_then_after_every_child(parent: Operation) -> Operation:
    """The then exists once, and was written by the transaction that settled the parent, which is
    the ending transaction of one child (the last to commit: the tally had every child).

    Timestamps are transaction starts (now()), not commit order, so they can show the same
    transaction but not "later than every other child"; the complete tally shows that.
    """
    [then] = callbacks(parent.id)
    kids = children(parent.id)
    assert all(c.done and c.fanned_in for c in kids)
    assert parent.units_done == parent.children_total == len(kids)
    assert then.created_at == parent.finished_at
    assert any(c.finished_at == parent.finished_at for c in kids)
    return then


@pytest.mark.slow
def test_a_batch_of_200_ends_once_and_starts_then_once_while_workers_are_sigkilled(ops_worker, start_worker):
    rng = random.Random(14)
    requests = [{"n": 1 + i % 7, "pause": rng.choice([0.05, 0.1, 0.2, 0.4])} for i in range(200)]
    b = operations.batch("test.ops.batch.child", requests, then=("test.ops.batch.then", {"tag": "chaos"}))

    names = {}

    def spawn():
        return spawn_ops_worker(start_worker, names, "fan")

    workers = [spawn() for _ in range(3)]
    # The kills follow the batch's progress, not the clock (a fast machine once finished it
    # before a timed first kill): one as soon as a worker runs a child, then one every 25 ended.
    thresholds = [0, 25, 50, 75, 100, 125, 150, 175]
    kills = 0
    started = time.monotonic()
    while not (parent := op_row(b.id)).done:
        assert time.monotonic() - started < 300, f"the batch did not end: {parent.child_counts()}"
        counts = parent.child_counts()
        if kills < len(thresholds) and counts["total"] - counts["open"] >= thresholds[kills]:
            # SIGKILL a worker in the middle of running children, then start another.
            running = set(Operation.objects.filter(parent_id=b.id, state="running").values_list("worker_id", flat=True))
            busy = [w for w in workers if w.alive() and names[w] in running]
            if busy:
                victim = rng.choice(busy)
                victim.kill()
                kills += 1
                workers[workers.index(victim)] = spawn()
        time.sleep(0.05)
    assert kills >= 2, "the batch ended before the chaos began: make the children slower"

    b = op_row(b.id)
    assert b.state == "succeeded", (b.state, b.error_message)
    assert b.child_counts() == {"total": 200, "open": 0, "succeeded": 200, "failed": 0, "cancelled": 0}
    assert (b.units_total, b.units_done, b.count) == (200, 200, sum(r["n"] for r in requests))
    assert not Operation.objects.filter(parent_id=b.id, fanned_in=False).exists()
    then = assert_then_after_every_child(b)
    wait_for_state(then.id, "succeeded", timeout=120)
    assert op_row(then.id).result_detail["states"] == {"succeeded": 200}
    # Exactly one callback operation, and one work item for it, whatever was killed.
    assert len(callbacks(b.id)) == 1
    assert WorkItem.objects.filter(key=then.id).count() >= 1
    assert not WorkItem.objects.filter(key__in=[c.id for c in children(b.id)]).unsettled().exists()


def test_a_child_that_fails_once_and_succeeds_on_retry_lets_the_batch_succeed_and_then_runs_once_after(ops_worker):
    b = operations.batch(
        "test.ops.batch.child",
        [{"n": 1}, {"n": 2, "fail_on": [1]}, {"n": 3}],
        then=("test.ops.batch.then", {"tag": "retry"}),
    )
    ops_worker("retry", "--concurrency", "2")
    b = wait_for_state(b.id, "succeeded", "failed", "cancelled", timeout=90)
    assert b.state == "succeeded"
    flaky = children(b.id)[1]
    assert flaky.attempts == 2 and flaky.state == "succeeded"
    assert [a.get("outcome") for a in flaky.attempt_log] == ["retried", "succeeded"]
    then = assert_then_after_every_child(b)
    # After the retry, not after the failed attempt.
    assert then.created_at > dt.datetime.fromisoformat(flaky.attempt_log[0]["finished_at"])
    then = wait_for_state(then.id, "succeeded", timeout=60)
    assert then.result_detail["rows"] == 6 and len(callbacks(b.id)) == 1
    assert OperationRun.objects.filter(op_id=then.id, event="began").count() == 1


def test_a_child_that_fails_for_good_fails_the_batch_with_the_count_and_first_error_and_then_still_runs_once(
    ops_worker,
):
    b = operations.batch(
        [
            ("test.ops.batch.child", {"n": 1}),
            ("test.ops.batch.doomed", {"why": "the first bad one"}),
            ("test.ops.batch.child", {"n": 2}),
            ("test.ops.batch.doomed", {"why": "the second bad one"}),
        ],
        then=("test.ops.batch.then", {"tag": "failed"}),
    )
    ops_worker("doomed", "--concurrency", "1")
    b = wait_for_state(b.id, "succeeded", "failed", "cancelled", timeout=90)
    assert b.state == "failed"
    assert b.error.code == "children_failed"
    assert b.error.message.startswith("2 of 4 children failed; the first: ")
    first = children(b.id)[1]
    assert first.id in b.error.message and "the first bad one" in b.error.message and "[doomed]" in b.error.message
    assert "the second bad one" not in b.error.message
    assert b.child_counts() == {"total": 4, "open": 0, "succeeded": 2, "failed": 2, "cancelled": 0}
    then = wait_for_state(assert_then_after_every_child(b).id, "succeeded", timeout=60)
    assert then.result_detail["parent_state"] == "failed"
    assert then.result_detail["states"] == {"succeeded": 2, "failed": 2}
    assert len(callbacks(b.id)) == 1


def test_a_chain_of_three_runs_in_order_each_step_reading_the_previous_and_a_failing_step_stops_it(ops_worker):
    good = operations.chain(
        [("test.ops.chain.add", {"add": 1}), ("test.ops.chain.add", {"add": 10}), ("test.ops.chain.add", {"add": 100})],
        then=("test.ops.batch.then", {"tag": "chain"}),
    )
    bad = operations.chain(
        [
            ("test.ops.chain.add", {"add": 1}),
            ("test.ops.batch.doomed", {"why": "step two breaks"}),
            ("test.ops.chain.add", {"add": 100}),
        ]
    )
    # Only the first step exists until it has succeeded.
    assert [len(children(good.id)), len(children(bad.id))] == [1, 1]
    ops_worker("chain", "--concurrency", "4")
    good = wait_for_state(good.id, "succeeded", "failed", "cancelled", timeout=90)
    bad = wait_for_state(bad.id, "succeeded", "failed", "cancelled", timeout=90)

    steps = children(good.id)
    assert good.state == "succeeded" and [s.result_detail["total"] for s in steps] == [1, 11, 111]
    assert [s.result_detail["previous"] for s in steps] == [None, steps[0].id, steps[1].id]
    # Order: each step was created (started) only after the previous one finished.
    assert steps[0].finished_at <= steps[1].created_at and steps[1].finished_at <= steps[2].created_at
    assert good.result_detail == steps[2].result_detail and (good.units_done, good.units_total) == (3, 3)
    wait_for_state(assert_then_after_every_child(good).id, "succeeded", timeout=60)

    steps = children(bad.id)
    assert [s.state for s in steps] == ["succeeded", "failed"], "the step after a failed one must never start"
    assert bad.state == "failed" and bad.error.code == "doomed" and "step two breaks" in bad.error.message
    assert (bad.units_done, bad.units_total) == (2, 3)


def test_cancelling_a_batch_midway_cancels_pending_children_at_once_and_running_ones_stop(ops_worker):
    b = operations.batch("test.ops.hold", [{"seconds": 60} for _ in range(6)], then=("test.ops.batch.then", {}))
    ops_worker("cancel", "--concurrency", "2", "--batch", "2")
    wait_until(
        lambda: Operation.objects.filter(parent_id=b.id, state="running").count() == 2,
        timeout=60,
        message="two children running",
    )
    time.sleep(1.0)  # let them report some progress
    running = set(Operation.objects.filter(parent_id=b.id, state="running").values_list("id", flat=True))

    cancelled = operations.cancel(b.id)

    # At once: the pending children are cancelled, with their work items; the running ones asked.
    assert cancelled.cancel_requested and cancelled.state == "running"
    states = {c.id: c for c in children(b.id)}
    assert {i for i, c in states.items() if c.state == "cancelled"} == set(states) - running
    assert all(states[i].state == "running" and states[i].cancel_requested for i in running)
    pending_items = WorkItem.objects.filter(key__in=set(states) - running)
    assert pending_items.count() == 4 and all(w.state == "stopped" and w.outcome == "cancelled" for w in pending_items)

    # The running ones stop at their next check (a flush), and then the batch ends cancelled.
    b = wait_for_state(b.id, "succeeded", "failed", "cancelled", timeout=30)
    assert b.state == "cancelled"
    assert b.child_counts()["cancelled"] == 6
    for child in Operation.objects.filter(pk__in=running):
        # It saw the cancel at its next check and returned (test.ops.hold says why it stopped).
        assert child.state == "cancelled" and child.result_detail == {"stopped": "cancelled"}
    assert callbacks(b.id) == []  # then runs on succeeded or failed by default, not on cancel


def test_recover_settles_a_parent_left_open_by_a_crash_between_the_childs_write_and_the_fan_in(run_command):
    b = operations.batch("test.ops.batch.child", [{"n": 1}, {"n": 2}], then=("test.ops.batch.then", {"tag": "rec"}))
    first, second = children(b.id)
    assert run_next().key == first.id
    # The second child ends by its real terminal write, but the process dies before the fan-in
    # (simulated: op_finish alone, committed on its own, as a runner without the batch step would).
    item, op = begin(second.id)
    reporter = reporter_for(item, op)
    store.finish(
        id=op.id,
        item_id=item.id,
        token=item.lease_token,
        progress=reporter.snapshot(),
        state="succeeded",
        error_code="",
        error_message="",
        error_retryable=False,
        result_uri="",
        result_detail='{"n": 2}',
        all_done=True,
        cancel_wins=False,
        attempt="{}",
    )
    reporter.close()
    assert op_row(second.id).state == "succeeded" and not op_row(second.id).fanned_in
    hanging = op_row(b.id)
    assert hanging.state == "running" and hanging.children_open == 1

    result = run_command("recover")
    assert result.returncode == 0, result.stderr
    assert "operations_fanned_in=1" in result.stdout and "operations_parents_settled=1" in result.stdout
    b = op_row(b.id)
    assert b.state == "succeeded" and b.child_counts()["succeeded"] == 2
    assert len(callbacks(b.id)) == 1
    # Again: nothing to do, and no second then.
    again = run_command("recover")
    assert again.returncode == 0 and "operations_fanned_in=0" in again.stdout
    assert len(callbacks(b.id)) == 1


def test_reap_deletes_a_parent_and_its_children_together_never_an_orphan_child(run_command):
    old = operations.batch("test.ops.batch.child", [{"n": 1}] * 3)
    young = operations.batch("test.ops.batch.child", [{"n": 1}] * 2)
    while run_next() is not None:
        pass
    assert op_row(old.id).state == op_row(young.id).state == "succeeded"
    with connection.cursor() as cur:
        # Everything of the old batch finished long ago; the young batch's children too, but
        # not the young batch itself: its children must stay.
        cur.execute(
            f"UPDATE {Operation._meta.db_table} SET finished_at = now() - interval '400 days' "
            "WHERE id = %s OR parent_id = ANY(%s)",
            [old.id, [old.id, young.id]],
        )
    result = run_command("reap")
    assert result.returncode == 0, result.stderr
    assert not Operation.objects.filter(pk=old.id).exists()
    assert not Operation.objects.filter(parent_id=old.id).exists()
    assert op_row(young.id) and len(children(young.id)) == 2
    # No child anywhere outlives its parent.
    parents = set(Operation.objects.values_list("id", flat=True))
    assert set(Operation.objects.exclude(parent_id=None).values_list("parent_id", flat=True)) <= parents


def test_reap_in_batches_smaller_than_a_batch_takes_each_parent_with_all_its_children(settings):
    # REAP_BATCH counts parents: one reap deletes one batch whole (its parent and every child),
    # never a parent without its children nor children without their parent.
    settings.OPERATIONS = {**settings.OPERATIONS, "REAP_BATCH": 1}
    batches = [operations.batch("test.ops.batch.child", [{"n": 1}] * 3) for _ in range(2)]
    while run_next() is not None:
        pass
    ids = [b.id for b in batches]
    with connection.cursor() as cur:
        cur.execute(
            f"UPDATE {Operation._meta.db_table} SET finished_at = now() - interval '400 days' "
            "WHERE id = ANY(%s) OR parent_id = ANY(%s)",
            [ids, ids],
        )
    for left in (1, 0):
        assert operations.reap() == {"deleted": 4}
        assert Operation.objects.filter(pk__in=ids).count() == left
        parents = set(Operation.objects.filter(pk__in=ids).values_list("id", flat=True))
        assert set(Operation.objects.filter(parent_id__in=ids).values_list("parent_id", flat=True)) == parents
        assert all(len(children(p)) == 3 for p in parents)
    assert operations.reap() == {"deleted": 0}
