"""The worker's batched completion: one statement settles a batch, each item under its own proof."""

from __future__ import annotations

import threading

import pytest
from django.db import connections

from tests.conftest import wait_until
from tests.workqueue.conftest import row
from workqueue import handlers, listener
from workqueue.models import WorkItem
from workqueue.worker import Worker, WorkerOptions

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "test.gated"
GATE = threading.Event()
STARTED: set[str] = set()


def gated(item, ctx):
    """Return (without settling: the settler does) once the test opens the gate."""
    STARTED.add(item.key)
    GATE.wait(30)


@pytest.fixture(autouse=True)
def gated_queue():
    """The gated handler, registered for this module's tests only."""
    GATE.clear()
    STARTED.clear()
    handlers.register(QUEUE, gated)
    yield
    handlers.unregister(QUEUE)


def test_a_batch_settles_the_others_and_counts_the_one_whose_lease_was_taken_over():
    worker = Worker(
        WorkerOptions(queues=[QUEUE], concurrency=3, batch=10, poll=0.2, worker_id="batcher", install_signals=False)
    )

    def run():
        try:
            worker.run()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, daemon=True)
    WorkItem.objects.enqueue_many([(QUEUE, k) for k in ("a", "b", "c")])
    thread.start()
    try:
        wait_until(lambda: len(STARTED) == 3, timeout=20, message="all three handlers to start")
        # b's lease lapses and another claimer takes it over (a new proof), while its handler runs.
        WorkItem.objects.filter(key="b").update(lease_expires_at="2000-01-01T00:00:00Z")
        (stolen,) = WorkItem.objects.claim([QUEUE], limit=1, worker_id="thief").items
        assert stolen.key == "b" and stolen.reclaimed
        GATE.set()  # the three handlers return; the settler settles them in one statement
        wait_until(lambda: worker.processed == 3, timeout=20, message="the batch to be settled")
    finally:
        GATE.set()
        worker.request_stop()
        thread.join(30)
        listener.shared().stop()  # the in-process worker started it; let the database go
    assert not thread.is_alive()
    assert (row("a").state, row("a").outcome) == ("stopped", "succeeded")
    assert (row("c").state, row("c").outcome) == ("stopped", "succeeded")
    taken = row("b")  # untouched: the new holder's row, proof and all
    assert (taken.state, taken.claimed_by, taken.lease_token) == ("active", "thief", stolen.lease_token)
    assert worker.lost == 1 and worker.succeeded == 2 and worker.failed == 1
