"""Dependencies under real ``manage.py runworker`` processes (operations.deps); the direct
tests (every rule, the races, recover, reap) are in test_deps.py."""

from __future__ import annotations

import pytest

import operations
from operations import store
from operations.models import OperationDependency
from tests.operations.conftest import begin, op_row, reporter_for, wait_for_state
from tests.testapp.models import OperationRun
from workqueue.models import WorkItem

pytestmark = pytest.mark.django_db(transaction=True)

CHILD = "test.ops.batch.child"
ENDED = ("succeeded", "failed", "cancelled")


def began(op_id: str) -> list[OperationRun]:
    return list(OperationRun.objects.filter(op_id=op_id, event="began"))


def test_a_diamond_under_two_workers_runs_d_exactly_once_after_both_b_and_c(ops_worker):
    a = operations.start(CHILD, {"n": 1, "pause": 0.3})
    b = operations.start(CHILD, {"n": 2, "pause": 0.6}, after=[a.id])
    c = operations.start(CHILD, {"n": 3, "pause": 0.1}, after=[a.id])
    d = operations.start(CHILD, {"n": 4}, after=[b.id, c.id])
    ops_worker("deps-1", "--concurrency", "2")
    ops_worker("deps-2", "--concurrency", "2")
    d = wait_for_state(d.id, *ENDED, timeout=90)
    assert d.state == "succeeded", (d.state, d.error_message)
    rows = {x.id: op_row(x.id) for x in (a, b, c)}
    assert all(r.state == "succeeded" for r in rows.values())
    # B and C ran only after A ended, D only after both (database clocks: the transaction that
    # began D started after the ones that ended B and C committed).
    assert min(rows[b.id].started_at, rows[c.id].started_at) > rows[a.id].finished_at
    assert d.started_at > max(rows[b.id].finished_at, rows[c.id].finished_at)
    # Exactly once: one run, one attempt, one work item, whichever process decided it.
    assert len(began(d.id)) == 1 and d.attempts == 1
    assert WorkItem.objects.filter(key=d.id).count() == 1
    assert not OperationDependency.objects.filter(decided=False).exists()


def test_a_failed_b_ends_d_dependency_failed_under_a_real_worker_and_d_never_runs(ops_worker):
    a = operations.start(CHILD, {"n": 1})
    b = operations.start("test.ops.batch.doomed", {"why": "b breaks"}, after=[a.id])
    c = operations.start(CHILD, {"n": 3, "pause": 0.5}, after=[a.id])
    d = operations.start(CHILD, {"n": 4}, after=[b.id, c.id])
    ops_worker("deps-fail", "--concurrency", "2")
    d = wait_for_state(d.id, *ENDED, timeout=90)
    c = wait_for_state(c.id, *ENDED, timeout=90)
    assert op_row(b.id).state == "failed" and c.state == "succeeded"
    assert (d.state, d.error.code) == ("failed", "dependency_failed")
    assert f"dependency {b.id} ended failed (doomed)" in d.error.message
    assert d.finished_at == op_row(b.id).finished_at  # decided in the transaction that ended B
    assert began(d.id) == [] and not WorkItem.objects.filter(key=d.id).exists()


def test_a_dependent_started_by_a_running_operation_runs_after_it_under_a_real_worker(ops_worker):
    a = operations.start("test.ops.deps.spawn", {"pause": 0.5})
    ops_worker("deps-late", "--concurrency", "2")
    a = wait_for_state(a.id, *ENDED, timeout=90)
    assert a.state == "succeeded" and a.has_dependents
    dependent = wait_for_state(a.result_detail["dependent"], *ENDED, timeout=60)
    assert dependent.state == "succeeded" and dependent.started_at > a.finished_at
    assert len(began(dependent.id)) == 1


def test_manage_py_recover_decides_a_dependent_left_waiting_by_a_crash_and_a_worker_runs_it_once(
    run_command, ops_worker
):
    a = operations.start(CHILD, {"n": 1})
    b = operations.start(CHILD, {"n": 2}, after=[a.id])
    # A ends by its real terminal write, but the process dies before the decision (simulated:
    # op_finish alone, committed on its own, as a runner whose operation gained a dependent
    # while it ran writes it before its second transaction).
    item, op = begin(a.id)
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
        result_detail=None,
        all_done=True,
        cancel_wins=False,
        attempt="{}",
    )
    reporter.close()
    assert op_row(b.id).deps_open == 1 and not WorkItem.objects.filter(key=b.id).exists()

    result = run_command("recover")
    assert result.returncode == 0, result.stderr
    assert "operations_dependencies_decided=1" in result.stdout and "operations_reoffered=0" in result.stdout
    assert op_row(b.id).deps_open == 0 and WorkItem.objects.filter(key=b.id).count() == 1
    again = run_command("recover")
    assert again.returncode == 0 and "operations_dependencies_decided=0" in again.stdout
    ops_worker("deps-recover", "--concurrency", "1")
    b = wait_for_state(b.id, *ENDED, timeout=90)
    assert b.state == "succeeded" and len(began(b.id)) == 1
    assert WorkItem.objects.filter(key=b.id).count() == 1
