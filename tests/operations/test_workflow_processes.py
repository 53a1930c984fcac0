"""Workflows under real ``manage.py runworker`` processes, SIGKILLed mid-step, mid-transaction
and between steps; durable sleeps across a restart; a signal from this process waking a
workflow another process runs; a 1-slot worker running other work while 100 workflows wait."""

from __future__ import annotations

import time

import pytest

import operations
from operations.models import Operation, OperationStep
from tests.conftest import wait_until
from tests.operations.conftest import op_row, spawn_ops_worker, wait_for_state
from tests.testapp.models import Sample

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def counted(what: str, op_id: str) -> int:
    return Sample.objects.filter(name=f"{what}:{op_id}").count()


def step_state(op_id: str, position: int) -> str | None:
    row = OperationStep.objects.filter(op_id=op_id, position=position).first()
    return row and row.state


# where to kill: the moment to wait for before the SIGKILL
MOMENTS = {
    # step b (plain) has counted its run and is still inside its body
    "in a plain step": ({"pause_b": 3.0}, lambda op_id: counted("b", op_id) == 1),
    # step c (transaction=True) began (its running record is committed) and sits inside its transaction
    "in a transaction step": ({"pause_c": 3.0}, lambda op_id: step_state(op_id, 2) == "running"),
    # step a is recorded and b has not begun: between the two
    "between steps": ({"between": 3.0}, lambda op_id: step_state(op_id, 0) == "succeeded"),
}


@pytest.mark.parametrize("moment", list(MOMENTS))
def test_a_workflow_sigkilled_resumes_without_redoing_finished_steps(start_worker, moment):
    request, ready = MOMENTS[moment]
    names: dict = {}
    victim = spawn_ops_worker(start_worker, names, "wf")
    op = operations.start("test.wf.crashy", request)
    wait_until(lambda: ready(op.id), timeout=60, message=f"the workflow to be {moment}")
    victim.kill()
    spawn_ops_worker(start_worker, names, "wf")
    done = wait_for_state(op.id, "succeeded", "failed", "cancelled", timeout=90)
    assert done.state == "succeeded"
    assert done.result.detail == {"total": 10}
    assert counted("a", op.id) == 1, "a finished step never runs again"
    assert counted("c", op.id) == 1, "the transaction step ran exactly once"
    assert 1 <= counted("b", op.id) <= (2 if moment == "in a plain step" else 1)
    assert counted("d", op.id) == 1
    assert [s.state for s in operations.steps(op.id)] == ["succeeded"] * 4
    assert done.worker_id != names[victim]


def test_a_durable_sleep_outlives_its_worker(start_worker):
    names: dict = {}
    first = spawn_ops_worker(start_worker, names, "sleepy")
    op = operations.start("test.wf.onboard", {"sleep": 3.0, "timeout": 60})
    wait_until(lambda: op_row(op.id).wait_kind == "sleep", timeout=60, message="the workflow to sleep")
    first.kill()  # nothing is held while it sleeps: a dead worker loses nothing
    spawn_ops_worker(start_worker, names, "sleepy")
    wait_until(lambda: op_row(op.id).wait_kind == "signal", timeout=60, message="the sleep to end elsewhere")
    operations.signal(op.id, "approved", {"by": "ops"})
    done = wait_for_state(op.id, "succeeded", "failed", timeout=60)
    assert done.state == "succeeded" and done.result.detail["approval"] == {"by": "ops"}
    assert counted("create", op.id) == 1


def test_a_signal_from_another_process_wakes_a_waiting_workflow_at_once(start_worker):
    names: dict = {}
    spawn_ops_worker(start_worker, names, "signal")
    op = operations.start("test.wf.waiter", {"timeout": 3600})
    wait_until(lambda: op_row(op.id).wait_kind == "signal", timeout=60, message="the workflow to wait")
    sent = time.monotonic()
    operations.signal(op.id, "go", {"from": "the test process"})
    done = wait_for_state(op.id, "succeeded", "failed", timeout=30)
    woke_in = time.monotonic() - sent
    assert done.result.detail == {"got": {"from": "the test process"}}
    # A wake-up happened at all: without it the item was due only in an hour (generous bound).
    assert woke_in < 10, f"the signal took {woke_in:.1f}s to wake it"


def test_waiting_workflows_hold_nothing_and_a_one_slot_worker_runs_other_work(start_worker):
    ids = [operations.start("test.wf.waiter", {"timeout": 3600}).id for _ in range(100)]
    start_worker("--worker-id", "one-slot", "--queue", "operations", "--concurrency", "1", "--poll", "0.5")
    wait_until(
        lambda: Operation.objects.filter(id__in=ids, wait_kind="signal").count() == 100,
        timeout=120,
        message="100 workflows to wait",
    )
    other = operations.start("test.ops.count", {"steps": 1})
    assert wait_for_state(other.id, "succeeded", "failed", timeout=60).state == "succeeded"
    assert Operation.objects.filter(id__in=ids, state="running").count() == 0
    for op_id in ids[:10]:
        operations.signal(op_id, "go", op_id)
    for op_id in ids[:10]:
        assert wait_for_state(op_id, "succeeded", timeout=60).result.detail == {"got": op_id}


def test_an_async_workflow_runs_on_the_event_loop_of_a_real_worker(start_worker):
    names: dict = {}
    spawn_ops_worker(start_worker, names, "async")
    op = operations.start("test.wf.async", {"sleep": 1.0, "timeout": 3600})
    wait_until(lambda: op_row(op.id).wait_kind == "signal", timeout=60, message="the async workflow to wait")
    operations.signal(op.id, "go", "from afar")
    done = wait_for_state(op.id, "succeeded", "failed", timeout=60)
    assert done.state == "succeeded", done.error
    assert done.result.detail == {"first": "early", "got": "from afar", "last": "late"}
    assert counted("early", op.id) == 1 and counted("late", op.id) == 1
