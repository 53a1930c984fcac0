"""``async def`` operation kinds and django.tasks tasks: awaited on the worker's event loop, many
at once, with the same outcome rules as sync runs (the real claim loop, in this process)."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connections

import operations
from operations.models import Operation
from operations.reporter import AsyncReporter
from tests.conftest import wait_until
from tests.operations.conftest import items_for, op_row, run_next, wait_for_state
from tests.testapp.models import Sample
from workqueue.worker import Worker, WorkerOptions

pytestmark = pytest.mark.django_db(transaction=True)


class Running:
    """A Worker on a thread of this process, serving ``queues``; sampling the peak of running operations."""

    def __init__(self, *queues: str, concurrency: int = 2, grace: float = 2.0):
        self.worker = Worker(
            WorkerOptions(
                queues=list(queues),
                concurrency=concurrency,
                batch=concurrency,
                poll=0.2,
                worker_id="async-ops",
                grace=grace,
                install_signals=False,
            )
        )
        self.peak = 0
        self._done = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, name="async-ops-worker", daemon=True),
            threading.Thread(target=self._sample, name="async-ops-sampler", daemon=True),
        ]

    def _run(self) -> None:
        try:
            self.worker.run()
        finally:
            connections.close_all()

    def _sample(self) -> None:
        try:
            while not self._done.wait(0.05):
                self.peak = max(self.peak, Operation.objects.filter(state="running").count())
        finally:
            connections.close_all()

    def __enter__(self):
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.worker.request_stop()
        self._done.set()
        for t in self._threads:
            t.join(30)
        assert not any(t.is_alive() for t in self._threads)


def test_the_registry_knows_an_async_kind():
    from operations.registry import registry

    assert registry.get("test.ops.async_wait").is_async
    assert not registry.get("test.ops.tiers").is_async


def test_async_operations_run_many_at_once_beyond_the_thread_count(otel):
    exporter, _ = otel
    ops = [operations.start("test.ops.async_wait", {"seconds": 2}) for _ in range(12)]
    with Running("operations", concurrency=2) as running:
        for op in ops:
            wait_for_state(op.id, "succeeded", timeout=60)
    assert running.peak >= 6, f"peak {running.peak} running at once on 2 threads"
    for op in ops:
        done = op_row(op.id)
        assert done.result_detail == {"flushed": True, "count": 10}
        assert (done.units_done, done.units_total, done.count, done.attempts) == (10, 10, 10, 1)
    # The run span of an async operation covers its coroutine and its end.
    finishes = [s for s in exporter.get_finished_spans() if s.name == "operations.finish test.ops.async_wait"]
    assert len(finishes) == 12 and all(s.attributes["operations.state"] == "succeeded" for s in finishes)
    runs = {s.context.span_id for s in exporter.get_finished_spans() if s.name == "workqueue.run operations"}
    assert all(s.parent.span_id in runs for s in finishes)


def test_a_cancel_reaches_a_running_async_operation_at_its_next_await():
    op = operations.start("test.ops.async_hold", {"seconds": 60})
    with Running("operations"):
        wait_until(lambda: Sample.objects.filter(name=f"async-op-started:{op.id}").exists(), message="the run to start")
        started = time.monotonic()
        operations.cancel(op.id)
        done = wait_for_state(op.id, "cancelled", timeout=30)
        assert time.monotonic() - started < 30
    assert (done.error_code, done.attempts) == ("cancelled", 1)
    assert not items_for(op.id).filter(state__in=["queued", "starting", "active"]).exists()


def test_an_async_run_that_fails_is_retried_like_a_sync_one():
    op = operations.start("test.ops.async_flaky")
    with Running("operations"):
        done = wait_for_state(op.id, "succeeded", timeout=30)
    assert (done.attempts, done.result_detail) == (2, {"attempt": 2})
    assert [e["outcome"] for e in done.attempt_log] == ["retried", "succeeded"]


def test_a_worker_shutting_down_releases_a_running_async_operation_to_pending():
    op = operations.start("test.ops.async_hold", {"seconds": 60})
    running = Running("operations", grace=0.5)
    with running:
        wait_until(lambda: Sample.objects.filter(name=f"async-op-started:{op.id}").exists(), message="the run to start")
    after = op_row(op.id)
    assert after.state == "pending", after.state
    assert items_for(op.id).filter(state="queued").exists()


def test_run_next_awaits_an_async_kind_inline_with_an_async_reporter(monkeypatch):
    seen = []
    original = AsyncReporter.__init__

    def spy(self, *args, **kwargs):
        seen.append(type(self))
        original(self, *args, **kwargs)

    monkeypatch.setattr(AsyncReporter, "__init__", spy)
    op = operations.start("test.ops.async_wait", {"seconds": 0.1})
    run_next()
    assert op_row(op.id).state == "succeeded"
    assert seen == [AsyncReporter]


def test_an_async_task_is_awaited_on_the_loop_and_returns_its_value():
    from tests.testapp.tasks import async_slow_add, async_with_context

    results = [async_slow_add.enqueue(i, 1) for i in range(8)]
    ctx_result = async_with_context.enqueue(40)
    with Running("tasks.default", concurrency=1) as running:
        for r in [*results, ctx_result]:
            wait_for_state(r.id, "succeeded", timeout=60)
    assert [async_slow_add.get_result(r.id).return_value for r in results] == [i + 1 for i in range(8)]
    assert async_with_context.get_result(ctx_result.id).return_value == {"attempt": 1, "result_id": ctx_result.id}
    assert op_row(ctx_result.id).count == 40
    assert running.peak >= 3, f"peak {running.peak} tasks at once on 1 thread"
