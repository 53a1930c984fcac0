"""Helpers for the operations tests: run operations in-process, read rows, clean up threads.

``run_next()`` is one turn of a worker done by hand in the calling thread: claim one item of
the operations queue and run the real handler (``operations.runner.handle``) on it.
``InlineWorker`` runs the real claim loop (``workqueue.worker.Worker``) in a thread of the
test process, for tests that want a live worker without a subprocess. Both need
``@pytest.mark.django_db(transaction=True)``: the runner's flushes run on other threads'
connections, which see only committed rows.
"""

from __future__ import annotations

import threading
import time

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.db import connections
from django.test import Client

from operations import reporter as reporter_mod
from operations import runner, store
from operations import watcher as watcher_mod
from operations.conf import ops_settings
from operations.models import Operation
from operations.reporter import Attempt, Reporter
from tests.conftest import wait_until
from workqueue import listener
from workqueue.items import Item
from workqueue.models import WorkItem
from workqueue.worker import Context, Worker, WorkerOptions


def op_row(op_id: str) -> Operation:
    return Operation.objects.get(pk=op_id)


def items_for(op_id: str):
    return WorkItem.objects.filter(key=op_id).order_by("id")


def claim_one(worker_id: str = "inline", queue: str = "operations") -> Item | None:
    result = WorkItem.objects.claim([queue], limit=1, worker_id=worker_id)
    return result.items[0] if result.items else None


def run_next(worker_id: str = "inline", queue: str = "operations") -> Item | None:
    """Claim one operations item and run the real handler on it here; None when idle."""
    item = claim_one(worker_id, queue)
    if item is None:
        return None
    ctx = Context(item, None, worker_id, "default")
    returned = runner.handle(item, ctx)
    if returned is not None:  # an async def kind: awaited here, as testing.drain does
        async_to_sync(_await)(returned)
    assert ctx.settled
    return item


async def _await(awaitable):
    return await awaitable


def run_to_end(op_id: str, *, limit: int = 20) -> Operation:
    """Run turns until the operation is terminal (retries are immediate in tests)."""
    for _ in range(limit):
        op = op_row(op_id)
        if op.done:
            return op
        if run_next() is None:
            time.sleep(0.05)
    op = op_row(op_id)
    assert op.done, f"{op_id} did not finish: {op.state}"
    return op


def begin(op_id: str, worker_id: str = "inline") -> tuple[Item, Operation]:
    """Claim the operation's item and take the operation with the real ``op_begin``."""
    item = claim_one(worker_id)
    assert item is not None and item.key == op_id
    rows = store.run(
        "op_begin",
        {
            "id": op_id,
            "item_id": item.id,
            "token": item.lease_token,
            "lease": ops_settings().lease,
            "worker_id": worker_id,
        },
    )
    assert rows, "begin was refused"
    return item, store.to_operation(rows[0], store.RUN_COLUMNS)  # begin returns the run columns


def reporter_for(item: Item, op: Operation) -> Reporter:
    conf = ops_settings()
    return Reporter(
        op_id=op.id,
        item_id=item.id,
        token=item.lease_token,
        attempt=Attempt(id=op.id, number=op.attempts, final=op.attempts >= op.max_attempts),
        lease=conf.lease,
        interval=conf.progress_interval,
        count_label=op.count_label,
        units_total=op.units_total,
        count=op.count,
    )


class InlineWorker:
    """The real claim loop in a thread of this process: ``with InlineWorker() as w: ...``."""

    def __init__(self, worker_id: str = "inline-worker", *, concurrency: int = 4, grace: float = 2.0):
        self.worker = Worker(
            WorkerOptions(
                queues=["operations"],
                concurrency=concurrency,
                batch=concurrency,
                poll=0.2,
                worker_id=worker_id,
                grace=grace,
                install_signals=False,
            )
        )
        self.thread = threading.Thread(target=self._run, name=f"inline-{worker_id}", daemon=True)

    def _run(self) -> None:
        try:
            self.worker.run()
        finally:
            connections.close_all()

    def __enter__(self) -> InlineWorker:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.worker.request_stop()
        self.thread.join(30)
        assert not self.thread.is_alive(), "the inline worker did not stop"


def wait_for_state(op_id: str, *states: str, timeout: float = 30.0) -> Operation:
    return wait_until(
        lambda: (op := op_row(op_id)).state in states and op,
        timeout=timeout,
        message=f"{op_id} to reach {'/'.join(states)}",
    )


@pytest.fixture(autouse=True)
def _quiet_threads():
    """End the threads this process started (watcher, listener, flusher) so the database can go."""
    reporter_mod.flusher.linger = 0.2
    yield
    shared = watcher_mod._shared
    if shared is not None:
        shared.close()
        if shared._thread is not None:
            shared._thread.join(5)
    listener.shared().stop()
    flusher_thread = reporter_mod.flusher._thread
    if flusher_thread is not None:
        flusher_thread.join(5)


def in_thread(fn, *args) -> threading.Thread:
    """Run ``fn(*args)`` in a started daemon thread that closes its connections when done."""

    def body():
        try:
            fn(*args)
        finally:
            connections.close_all()

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def ops_worker(start_ready_worker):
    """Start ``runworker --queue operations`` and wait until its loop is running."""

    def start(worker_id: str, *args: str):
        return start_ready_worker(worker_id, "--queue", "operations", "--poll", "0.5", *args)

    return start


def collect(subscription, timeout: float = 30.0) -> list:
    """Every snapshot a subscription delivers until its stream ends (fail after ``timeout``)."""
    snapshots = []
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            pytest.fail(f"the subscription to {subscription.op_id} did not end in {timeout}s")
        try:
            snapshot = subscription.get(timeout=remaining)
        except StopIteration:
            return snapshots
        if snapshot is not None:
            snapshots.append(snapshot)


@pytest.fixture
def user():
    """A plain (non-staff) user, the owner of the operations the HTTP tests start."""
    return get_user_model().objects.create_user("ada")


@pytest.fixture
def client(user) -> Client:
    """pytest-django's ``client``, signed in as ``user`` for every operations test."""
    client = Client()
    client.force_login(user)
    return client


def spawn_ops_worker(start_worker, names: dict, prefix: str, *extra: str):
    """Start one plain ``runworker`` process (every registered queue, as a site runs it) named
    ``<prefix>-<n>``, with ``extra`` arguments; note its name in ``names``."""
    name = f"{prefix}-{len(names) + 1}"
    proc = start_worker("--worker-id", name, "--concurrency", "4", "--batch", "4", "--poll", "0.5", *extra)
    names[proc] = name
    return proc
