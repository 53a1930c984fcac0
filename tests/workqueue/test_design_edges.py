"""Queue behaviours the design specifies, each proven: /metrics on a database error, recover
finalizing a stopping item that has no lease, and a full claim going straight round."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections

from tests.conftest import wait_until
from tests.workqueue.conftest import row
from workqueue import metrics
from workqueue.models import WorkItem
from workqueue.sweeps import recover as recovery
from workqueue.worker import Worker, WorkerOptions

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def database_down():
    """Point the default connection at a port nothing listens on (a real refused connection)."""

    def down():
        connection.close()
        connection.settings_dict["PORT"] = "1"

    original = connection.settings_dict["PORT"]
    yield down
    connection.close()
    connection.settings_dict["PORT"] = original


def test_metrics_answer_503_when_the_database_cannot_be_read(client, database_down, settings):
    settings.WORKQUEUE = {**settings.WORKQUEUE, "METRICS_CACHE": 0}
    metrics.clear_cache()
    WorkItem.objects.enqueue("test.noop", "counted")
    assert client.get("/metrics").status_code == 200  # the same scrape with the database up
    database_down()
    refused = client.get("/metrics")
    assert refused.status_code == 503, refused.content
    assert refused["Content-Type"].startswith("text/plain")
    assert b"unavailable" in refused.content
    assert b"workqueue_" not in refused.content  # no half-read gauges


def test_recover_finalizes_a_stopping_item_that_has_no_lease():
    WorkItem.objects.enqueue("test.noop", "leaseless")
    WorkItem.objects.enqueue("test.noop", "winding-down")
    # A stopping item with no lease at all (its expiry cleared), and one still winding down.
    WorkItem.objects.filter(key="leaseless").update(state="stopping", lease_token=None, lease_expires_at=None)
    WorkItem.objects.filter(key="winding-down").update(
        state="stopping", lease_token="00000000-0000-0000-0000-000000000001", lease_expires_at="2999-01-01T00:00:00Z"
    )
    assert recovery.finalize_stopping() == 1
    done = row("leaseless")
    assert (done.state, done.outcome, done.lease_expires_at) == ("stopped", "stopped", None)
    assert done.stopped_at is not None
    assert row("winding-down").state == "stopping"  # its holder may still finish it
    assert recovery.finalize_stopping() == 0


def test_a_full_claim_goes_straight_round_without_waiting_for_the_poll_interval():
    items = 40
    WorkItem.objects.enqueue_many([("test.noop", f"round-{i}") for i in range(items)])
    # One pool, batch 4: 40 items are at least ten claims. The poll is an hour and the items
    # were queued before the worker listened (no NOTIFY to wake it), so only going straight
    # round after a full claim can drain them inside the test's wait.
    worker = Worker(
        WorkerOptions(
            queues=["test.noop"], batch=4, concurrency=2, poll=3600.0, worker_id="rounds", install_signals=False
        )
    )
    thread = threading.Thread(target=_run, args=(worker,), name="rounds-loop", daemon=True)
    thread.start()
    try:
        wait_until(lambda: worker.processed >= items, timeout=60, message="the backlog to drain")
    finally:
        worker.request_stop()
        thread.join(30)
    assert not thread.is_alive()
    assert worker.succeeded == items
    assert not WorkItem.objects.filter(queue="test.noop").unsettled().exists()


def _run(worker: Worker) -> None:
    try:
        worker.run()
    finally:
        connections.close_all()
