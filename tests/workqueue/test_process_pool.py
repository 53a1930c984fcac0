"""The process pool (``runworker --pool processes``, or a handler's ``pool="processes"``) and the
limits the worker enforces itself (``soft_timeout``, ``timeout``, ``max_memory_mb``), proven with
real ``runworker`` processes: CPU-bound work in two children, a child SIGKILLed mid-run, runs
past their timeout on a child and on a thread, a soft timeout heeded, a child over its memory
limit replaced, and operations and workflows run in children."""

from __future__ import annotations

import itertools

import pytest

import operations
from tests.conftest import wait_until
from tests.operations.conftest import wait_for_state
from tests.testapp.models import Sample
from tests.workqueue.conftest import row
from workqueue.models import Worker, WorkItem

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def sample(what: str, key: str) -> list[int]:
    return list(Sample.objects.filter(name=f"{what}:{key}").order_by("id").values_list("value", flat=True))


def settled(key: str, timeout: float = 60.0) -> WorkItem:
    return wait_until(
        lambda: (item := row(key)).state == "stopped" and item, timeout=timeout, message=f"{key} to be settled"
    )


def test_a_cpu_bound_queue_runs_in_two_child_processes_at_once(make_worker_ready):
    keys = [f"cpu-{n}" for n in range(8)]
    for key in keys:
        WorkItem.objects.enqueue("test.cpu", key, metadata={"n": "3000000"})
    proc = make_worker_ready("cpu-pool", "--queue", "test.cpu", "--processes", "2")
    done = [settled(key, timeout=120) for key in keys]
    assert all(item.outcome == "succeeded" for item in done)
    pids = {sample("pid", key)[0] for key in keys}
    assert len(pids) == 2, f"two children ran the work: {pids}"
    assert proc.pid not in pids, "the work ran in children, not in the worker"

    # Two runs in different children overlapped in time (each run's own start and end).
    def span(key):
        began = Sample.objects.get(name=f"began:{key}")
        ended = Sample.objects.get(name=f"pid:{key}")
        return began.at, ended.at, ended.value

    runs = [span(key) for key in keys]
    assert any(a[2] != b[2] and a[0] < b[1] and b[0] < a[1] for a, b in itertools.combinations(runs, 2)), (
        "no two runs in different children overlapped"
    )


def test_a_child_sigkilled_mid_run_costs_only_that_attempt_and_is_replaced(make_worker_ready):
    for key in ("boom-1", "boom-2", "boom-3"):
        WorkItem.objects.enqueue("test.proc.suicide", key)
    make_worker_ready("suicide-pool", "--queue", "test.proc.suicide", "--processes", "2")
    for key in ("boom-1", "boom-2", "boom-3"):
        item = settled(key)
        assert (item.outcome, item.attempts) == ("succeeded", 2), item.last_error
        assert sample("started", key) == [1, 2]
    # what the first attempt recorded when its process died
    WorkItem.objects.enqueue("test.proc.suicide", "boom-last", max_attempts=1)
    item = settled("boom-last")
    assert item.outcome == "failed" and "worker process died" in item.last_error


@pytest.mark.parametrize("queue", ["test.proc.limits", "test.thread.limits"])
def test_a_run_past_its_timeout_is_ended_within_a_second_and_follows_its_attempts(make_worker_ready, queue):
    key = f"{queue}-hang"
    WorkItem.objects.enqueue(queue, key)
    args = ["--queue", queue, "--queue", "test.noop", "--concurrency", "1", "--processes", "1"]
    make_worker_ready(f"{queue}-worker", *args)
    item = settled(key)
    assert item.outcome == "failed" and item.attempts == 2, "the timeout failed each attempt; both were spent"
    assert "passed its timeout of 2s" in item.last_error
    assert sample("soft", key) == [1, 1], "the soft timeout reached the run first, each attempt"
    assert sample("done", key) == [], "the run never got to its end: the timeout ended it"
    # the time from the timeout to the run being stopped, per attempt: start + 2 s + a tick
    started_at = list(Sample.objects.filter(name=f"started:{key}").order_by("id").values_list("at", flat=True))
    assert len(started_at) == 2
    gap = (started_at[1] - started_at[0]).total_seconds()
    assert gap < 2 + 5, f"the second attempt began {gap:.1f}s after the first (the timeout is 2 s)"
    # the worker still has its capacity: another item runs (a new thread / a new child)
    WorkItem.objects.enqueue("test.noop", f"{queue}-after")
    assert settled(f"{queue}-after").outcome == "succeeded"
    if queue == "test.proc.limits":
        # The killed child's run is over: the watchdog holds nothing of it (a hung thread's run,
        # abandoned but still running, stays counted until it ends).
        wait_until(
            lambda: "limited" not in Worker.objects.get(pk=f"{queue}-worker").pool,
            timeout=30,
            message="the heartbeat to show no run under a limit",
        )
    else:
        wait_until(
            lambda: Worker.objects.get(pk=f"{queue}-worker").pool.get("limited") == 1,
            timeout=30,
            message="the heartbeat to count the abandoned thread's run",
        )


def test_a_run_that_heeds_its_soft_timeout_ends_normally(make_worker_ready):
    WorkItem.objects.enqueue("test.proc.limits", "obedient", metadata={"obey": "yes"})
    make_worker_ready("soft-pool", "--queue", "test.proc.limits", "--processes", "1")
    item = settled("obedient")
    assert sample("soft", "obedient") == [1] and sample("done", "obedient") == [1]
    assert item.attempts == 1


def test_a_child_over_its_memory_limit_is_replaced_after_its_run(make_worker_ready):
    proc = make_worker_ready("memory-pool", "--queue", "test.proc.memory", "--processes", "1")
    for n, mb in enumerate([0, 0, 200, 0]):
        WorkItem.objects.enqueue("test.proc.memory", f"mem-{n}", metadata={"mb": str(mb)})
        assert settled(f"mem-{n}").outcome == "succeeded"
    pids = [sample("pid", f"mem-{n}")[0] for n in range(4)]
    assert pids[0] == pids[1] == pids[2], "one child ran the first three (the third grew past 150 MB)"
    assert pids[3] != pids[2], "the child over its limit was replaced after its run"
    assert proc.alive()


def test_operations_workflows_and_tasks_run_in_children_as_on_threads(make_worker_ready):
    from tests.testapp import tasks

    op = operations.start("test.ops.tiers", {"units": 3, "per_unit": 10, "pause": 0.1})
    flow = operations.start("test.wf.four", {})
    result = tasks.add.enqueue(2, 3)
    args = ["--queue", "operations", "--queue", "tasks.default", "--pool", "processes", "--processes", "2"]
    proc = make_worker_ready("ops-pool", *args)
    done = wait_for_state(op.id, "succeeded", "failed", timeout=90)
    assert done.state == "succeeded", done.error
    assert (done.units_done, done.units_total, done.count) == (3, 3, 30)
    assert done.result.detail == {"units": 3}
    assert done.worker_id == "ops-pool"
    assert wait_for_state(flow.id, "succeeded", "failed", timeout=90).result.detail == {"steps": [0, 1, 2, 3]}
    wait_until(lambda: result.refresh() or result.is_finished, timeout=90, message="the task to finish")
    assert result.return_value == 5
    children = wait_until(
        lambda: set(Worker.objects.get(pk="ops-pool").pool.get("children") or []),
        timeout=30,
        message="the heartbeat to name the children",
    )
    assert proc.pid not in children
    assert proc.alive()


def test_the_workers_page_shows_the_pool_and_its_children(make_worker_ready, admin_client):
    from django.urls import reverse

    WorkItem.objects.enqueue("test.cpu", "shown", metadata={"n": "1000"})
    make_worker_ready("shown-pool", "--queue", "test.cpu", "--processes", "2")
    settled("shown")
    child = sample("pid", "shown")[0]
    wait_until(
        lambda: child in (Worker.objects.get(pk="shown-pool").pool.get("children") or []),
        timeout=30,
        message="the heartbeat to name the child",
    )
    pool = Worker.objects.get(pk="shown-pool").pool
    assert pool["processes"] == 2 and "threads" not in pool
    html = admin_client.get(reverse("admin:workqueue_worker_changelist")).content.decode()
    assert "2 processes (pids" in html and str(child) in html


def test_a_child_is_replaced_after_max_tasks_per_child_runs(make_worker_ready):
    make_worker_ready("tasks-pool", "--queue", "test.cpu", "--processes", "1", "--max-tasks-per-child", "2")
    for n in range(3):
        WorkItem.objects.enqueue("test.cpu", f"few-{n}", metadata={"n": "10"})
        assert settled(f"few-{n}").outcome == "succeeded"
    pids = [sample("pid", f"few-{n}")[0] for n in range(3)]
    assert pids[0] == pids[1] != pids[2], pids


@pytest.mark.parametrize("catch", [False, True])
def test_an_async_handler_gets_its_soft_timeout_at_the_next_await(make_worker_ready, catch):
    key = f"async-soft-{catch}"
    WorkItem.objects.enqueue("test.async.limits", key, metadata={"catch": "yes"} if catch else None)
    make_worker_ready(f"async-soft-{int(catch)}", "--queue", "test.async.limits")
    item = settled(key)
    if catch:
        # it caught the cancel and returned: its work is done
        assert (item.outcome, item.attempts, sample("cancelled", key)) == ("succeeded", 1, [1])
    else:
        # the cancel propagated: the attempt failed, each time, and the attempts were spent
        assert (item.outcome, item.attempts, sample("cancelled", key)) == ("failed", 2, [1, 1]), item.last_error
        assert "soft timeout" in item.last_error


def test_an_operation_kinds_timeout_ends_its_run_with_code_timeout(make_worker_ready):
    op = operations.start("test.ops.deaf", {})
    make_worker_ready("ops-deaf", "--queue", "operations")
    done = wait_for_state(op.id, "failed", "succeeded", timeout=60)
    assert (done.state, done.error.code, done.attempts) == ("failed", "timeout", 2), done.error
    reasons = set(Sample.objects.filter(name__startswith=f"why:{op.id}:").values_list("name", flat=True))
    assert reasons == {f"why:{op.id}:timeout"}, "the soft timeout reached the run first"


def test_an_operation_whose_child_died_goes_on_with_its_next_attempt(make_worker_ready):
    op = operations.start("test.ops.suicide", {})
    make_worker_ready("ops-died", "--queue", "operations", "--pool", "processes", "--processes", "1")
    done = wait_for_state(op.id, "failed", "succeeded", timeout=60)
    assert (done.state, done.attempts, done.result.detail) == ("succeeded", 2, {"attempt": 2}), done.error
