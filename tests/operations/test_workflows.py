"""Workflows run in this process with the real handler (operations.workflows): checkpoints,
replay, durable sleeps and waits, signals, retries, nondeterminism, patches, forks, cancel
and reap. The SIGKILL tests with real runworker processes are in test_workflow_processes.py."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection, transaction

import operations
from operations import store
from operations.models import Operation, OperationSignal, OperationStep
from tests.conftest import wait_until
from tests.operations.conftest import items_for, op_row, run_next, run_to_end
from tests.testapp.models import Sample
from workqueue.models import WorkItem

pytestmark = pytest.mark.django_db(transaction=True)


def counted(what: str, op_id: str) -> int:
    return Sample.objects.filter(name=f"{what}:{op_id}").count()


def recorded(op_id: str) -> list[tuple[int, str, str, str]]:
    return [(s.position, s.kind, s.name, s.state) for s in operations.steps(op_id)]


def run_until_waiting(op_id: str, limit: int = 10) -> Operation:
    """Run turns until the operation waits (pending, waiting for something)."""
    for _ in range(limit):
        op = op_row(op_id)
        if op.state == "pending" and op.wait_kind:
            return op
        run_next()
    op = op_row(op_id)
    assert op.state == "pending" and op.wait_kind, f"{op_id} is not waiting: {op.state}"
    return op


def test_a_workflow_runs_its_steps_and_records_each_once():
    op = operations.start("test.wf.onboard", {"sleep": 0, "timeout": 30})
    assert op.workflow
    waiting = run_until_waiting(op.id)
    assert (waiting.wait_kind, waiting.wait_name) == ("signal", "approved")
    assert waiting.attempts == 0, "a wait is not an attempt spent"
    [item] = items_for(op.id).filter(state="queued")
    assert item.attempts == 0 and item.run_after > dt.datetime.now(dt.UTC) + dt.timedelta(seconds=20)
    operations.signal(op.id, "approved", {"by": "ops@example.com"})
    done = run_to_end(op.id)
    assert done.state == "succeeded", done.error
    assert done.result.detail == {
        "account": 42,
        "approval": {"by": "ops@example.com"},
        "invoice": 200,
        "key": f"{op.id}:4",
    }
    assert counted("create", op.id) == 1, "a recorded step never runs again on resume"
    assert counted("invoice", op.id) == 1
    assert recorded(op.id) == [
        (0, "step", "create", "succeeded"),
        (1, "sleep", "sleep", "succeeded"),
        (2, "wait", "approved", "succeeded"),
        (3, "step", "invoice", "succeeded"),
    ]
    assert [s.attempts for s in operations.steps(op.id) if s.kind == "step"] == [1, 1]
    [sig] = operations.signals(op.id)
    assert sig.taken_by_position == 2 and sig.taken_at is not None
    assert [a["outcome"] for a in done.attempt_log] == ["waiting", "succeeded"]


def test_a_durable_sleep_frees_the_item_until_its_wake_time():
    op = operations.start("test.wf.onboard", {"sleep": 1.0, "timeout": 30})
    waiting = run_until_waiting(op.id)
    assert waiting.wait_kind == "sleep" and waiting.wake_at is not None
    assert run_next() is None, "nothing is due while it sleeps"
    assert not WorkItem.objects.filter(key=op.id, state__in=["starting", "active"]).exists()
    wait_until(lambda: run_next() is not None, timeout=10, message="the sleep to end")
    assert op_row(op.id).wait_kind == "signal", "after the sleep it went on to its wait"
    assert counted("create", op.id) == 1


def test_a_signal_sent_before_the_wait_is_kept_and_delivered():
    op = operations.start("test.wf.waiter", {"timeout": 30})
    operations.signal(op.id, "go", {"n": 1})
    done = run_to_end(op.id)
    assert done.result.detail == {"got": {"n": 1}}
    assert done.attempt_log[-1]["outcome"] == "succeeded" and len(done.attempt_log) == 1


def test_signals_of_one_name_are_taken_in_the_order_sent():
    op = operations.start("test.wf.twice", {})
    with transaction.atomic():
        operations.signal(op.id, "go", "first")
        operations.signal(op.id, "go", "second")
    done = run_to_end(op.id)
    assert done.result.detail == {"first": "first", "second": "second"}


def test_a_signal_wakes_a_waiting_workflow_at_once():
    op = operations.start("test.wf.waiter", {"timeout": 3600})
    run_until_waiting(op.id)
    [item] = items_for(op.id).filter(state="queued")
    assert item.run_after > dt.datetime.now(dt.UTC) + dt.timedelta(minutes=30)
    operations.signal(op.id, "go", "now")
    item.refresh_from_db()
    assert item.run_after <= dt.datetime.now(dt.UTC), "the signal made its item due"
    assert run_to_end(op.id).result.detail == {"got": "now"}


def test_a_signal_rolled_back_with_its_transaction_never_arrives():
    op = operations.start("test.wf.waiter", {"timeout": 3600})
    run_until_waiting(op.id)
    with pytest.raises(RuntimeError), transaction.atomic():
        operations.signal(op.id, "go", "never")
        raise RuntimeError("the caller's transaction fails")
    assert operations.signals(op.id) == []
    [item] = items_for(op.id).filter(state="queued")
    assert item.run_after > dt.datetime.now(dt.UTC) + dt.timedelta(minutes=30)


def test_a_wait_times_out_with_none():
    op = operations.start("test.wf.waiter", {"timeout": 0.5})
    run_until_waiting(op.id)
    wait_until(lambda: run_next() is not None, timeout=10, message="the timeout")
    done = run_to_end(op.id)
    assert done.result.detail == {"got": None}
    assert recorded(op.id) == [(0, "wait", "go", "timed_out")]


def test_a_signal_to_a_finished_workflow_or_a_plain_operation_is_refused_clearly():
    op = operations.start("test.wf.waiter", {"timeout": 0})
    run_to_end(op.id)
    with pytest.raises(operations.OperationsError, match="succeeded: signals reach only unfinished"):
        operations.signal(op.id, "go")
    plain = operations.start("test.ops.count", {"steps": 1})
    with pytest.raises(operations.OperationsError, match="not a workflow"):
        operations.signal(plain.id, "go")
    with pytest.raises(operations.OperationNotFound):
        operations.signal("op_missing", "go")
    with pytest.raises(operations.InvalidRequest, match="JSON"):
        operations.signal(plain.id, "go", {1, 2})
    assert OperationSignal.objects.count() == 0


def test_a_step_retries_in_place_before_it_records_success():
    op = operations.start("test.wf.flaky", {"fails": 2})
    done = run_to_end(op.id)
    assert done.state == "succeeded" and done.result.detail == {"paid": "paid"}
    assert done.attempts == 1, "the step's retries are not the workflow's attempts"
    [step] = operations.steps(op.id)
    assert (step.state, step.attempts) == ("succeeded", 3)


def test_a_step_out_of_retries_fails_the_workflow_with_its_code_and_is_not_retried():
    op = operations.start("test.wf.doomed", {})
    done = run_to_end(op.id)
    assert done.state == "failed" and done.error.code == "card_declined"
    assert "step charge failed" in done.error.message
    assert done.attempts == 1
    assert counted("charge", op.id) == 2
    [step] = operations.steps(op.id)
    assert step.state == "failed" and step.error["code"] == "card_declined"


def test_a_resumed_run_that_takes_another_path_fails_nondeterministic():
    op = operations.start("test.wf.nondet", {})
    run_until_waiting(op.id)
    Sample.objects.create(name=f"flip:{op.id}", value=1)  # the code now calls two() first
    operations.signal(op.id, "go")
    done = run_to_end(op.id)
    assert done.state == "failed" and done.error.code == "nondeterministic"
    assert "'one'" in done.error.message and "'two'" in done.error.message
    assert counted("two", op.id) == 0, "nothing ran past the divergence"


def test_patched_is_true_for_new_runs_and_false_for_runs_already_past_it():
    old = operations.start("test.wf.patched", {})
    run_until_waiting(old.id)
    # The old run goes past the patch point with the old code, then the new code ships.
    Sample.objects.create(name=f"shipped:{old.id}", value=1)
    operations.signal(old.id, "go")
    assert run_to_end(old.id).result.detail["v2"] is True, "reaching it for the first time: the new path"
    again = operations.fork(old.id, from_step=3)
    Sample.objects.create(name=f"shipped:{again.id}", value=1)
    # its copied steps hold the patch marker at position 2: replayed, the answer stays True
    assert run_to_end(again.id).result.detail["v2"] is True
    older = operations.start("test.wf.patched", {})
    run_until_waiting(older.id)
    operations.signal(older.id, "go")
    assert run_to_end(older.id).result.detail["v2"] is False  # not shipped for this one: old path
    # a run recorded without the marker, resumed under the new code, keeps the old path
    fork = operations.fork(older.id, from_step=3)
    Sample.objects.create(name=f"shipped:{fork.id}", value=1)
    assert run_to_end(fork.id).result.detail["v2"] is False
    assert counted("two", fork.id) == 0, "the copied last step returned its record"


def test_fork_reruns_only_from_its_step():
    op = operations.start("test.wf.four", {})
    assert run_to_end(op.id).result.detail == {"steps": [0, 1, 2, 3]}
    fork = operations.fork(op.id, from_step=2)
    assert fork.forked_from_id == op.id and fork.request == op.request and fork.state == "pending"
    assert [(s.position, s.copied) for s in operations.steps(fork.id)] == [(0, True), (1, True)]
    assert run_to_end(fork.id).result.detail == {"steps": [0, 1, 2, 3]}
    assert [counted(f"s{n}", fork.id) for n in range(4)] == [0, 0, 1, 1]
    with pytest.raises(operations.InvalidRequest, match="not a workflow"):
        operations.fork(operations.start("test.ops.count", {}).id, from_step=0)


def test_cancelling_a_waiting_workflow_cancels_its_wait_and_its_child():
    op = operations.start("test.wf.child", {})
    run_until_waiting(op.id)
    [child_id] = operations.workflows.child_ids(op.id)
    assert op_row(child_id).state == "pending"
    cancelled = operations.cancel(op.id)
    assert cancelled.state == "cancelled"
    assert op_row(child_id).state == "cancelled"
    assert not WorkItem.objects.filter(key=op.id, state="queued").exists()
    assert run_next() is None


def test_a_cancel_while_running_stops_the_workflow_at_its_next_step():
    op = operations.start("test.wf.crashy", {"pause_b": 1.5})
    from tests.operations.conftest import in_thread

    thread = in_thread(run_next)
    wait_until(lambda: counted("b", op.id) == 1, timeout=20, message="step b to start")
    operations.cancel(op.id)
    thread.join(30)
    done = op_row(op.id)
    assert done.state == "cancelled"
    assert counted("c", op.id) == 0, "no step started after the cancel was seen"


def test_a_child_started_by_a_workflow_is_started_once_across_resumes():
    op = operations.start("test.wf.child", {})
    run_until_waiting(op.id)
    operations.signal(op.id, "other")  # a spurious wake: the run replays
    run_until_waiting(op.id)
    assert Operation.objects.filter(kind="test.ops.hold", id__startswith=op.id).count() == 1


def test_reaping_a_workflow_reaps_its_steps_and_signals():
    op = operations.start("test.wf.waiter", {"timeout": 30})
    operations.signal(op.id, "go", 1)
    run_to_end(op.id)
    assert OperationStep.objects.filter(op_id=op.id).exists()
    Operation.objects.filter(pk=op.id).update(finished_at=dt.datetime.now(dt.UTC) - dt.timedelta(days=400))
    assert operations.reap()["deleted"] == 1
    assert not OperationStep.objects.filter(op_id=op.id).exists()
    assert not OperationSignal.objects.filter(op_id=op.id).exists()


def test_step_writes_need_the_hold():
    op = operations.start("test.wf.four", {})
    token = "00000000-0000-0000-0000-000000000000"
    assert store.step_begin(id=op.id, token=token, position=0, name="x") is None
    assert store.step_save(id=op.id, token=token, position=0, name="x", kind="step", state="succeeded") is None
    assert not OperationStep.objects.filter(op_id=op.id).exists()


def test_an_async_workflow_runs_async_steps_sleeps_and_waits():
    op = operations.start("test.wf.async", {"sleep": 0.3, "timeout": 30})
    run_until_waiting(op.id)

    def reached_its_wait():
        if op_row(op.id).wait_kind == "signal":
            return True
        run_next()  # the sleep's wake: run it once due
        return False

    wait_until(reached_its_wait, timeout=10, message="the async workflow to wait for its signal")
    operations.signal(op.id, "go", "async")
    done = run_to_end(op.id)
    assert done.state == "succeeded", done.error
    assert done.result.detail == {"first": "early", "got": "async", "last": "late"}
    assert counted("early", op.id) == 1 and counted("late", op.id) == 1


def test_a_step_called_outside_a_workflow_just_runs():
    from tests.testapp import workflows

    assert workflows.invoice("plain", 5) == 10
    assert counted("invoice", "plain") == 1
    assert not OperationStep.objects.exists()


def test_bad_arguments_are_refused_with_a_clear_message():
    with pytest.raises(operations.InvalidDefinition, match="transaction=True needs a sync step"):

        @operations.step(transaction=True)
        async def nope():
            pass

    with pytest.raises(operations.InvalidDefinition, match="retries"):
        operations.step(retries=-1)


def test_no_item_is_held_while_many_workflows_wait_and_other_work_runs():
    ids = [operations.start("test.wf.waiter", {"timeout": 3600}).id for _ in range(100)]
    for _ in range(100):
        run_next()
    assert Operation.objects.filter(id__in=ids, state="pending", wait_kind="signal").count() == 100
    assert not WorkItem.objects.filter(key__in=ids, state__in=["starting", "active"]).exists()
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM work_items WHERE key = ANY(%s) AND lease_token IS NOT NULL", [ids])
        assert cur.fetchone()[0] == 0
    other = operations.start("test.ops.count", {"steps": 1})
    assert run_next().key == other.id, "a waiting workflow takes no slot"
