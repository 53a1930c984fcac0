"""The worker a site runs: every registered queue, sync and async, in one claim loop.

A plain ``runworker`` (no ``--queue``) serves every queue with a handler, so on a site with one
``async def`` handler its claim loop has two pools: the runner threads and the event loop. A
pool whose claim came back full must go straight round whatever the other pool did: an idle
event loop once made every full batch of the threads' pool look short, and the loop slept for
its poll interval between batches (about 3 items/s at the default 5 s poll).
"""

from __future__ import annotations

import signal
import threading
import time

import pytest
from django.db import connection, connections

from tests.conftest import wait_until
from tests.workqueue.conftest import terminate_other_backends
from workqueue.models import Worker as WorkerRow
from workqueue.models import WorkItem
from workqueue.worker import Worker, WorkerOptions

pytestmark = pytest.mark.django_db(transaction=True)

#: Far longer than any of these tests waits: a drain that waited for the poll even once fails.
POLL = "60"


def _in_thread(worker: Worker) -> threading.Thread:
    def run() -> None:
        try:
            worker.run()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, name="default-worker-loop", daemon=True)
    thread.start()
    return thread


def _stopped(worker: Worker, thread: threading.Thread) -> None:
    worker.request_stop()
    thread.join(30)
    assert not thread.is_alive()


def test_a_full_batch_of_the_threads_pool_goes_straight_round_while_the_event_loop_is_idle():
    items = 60
    WorkItem.objects.enqueue_many([("test.noop", f"n-{i}") for i in range(items)])
    # test.async.short is an async def queue with nothing to do: its pool has room and no work.
    worker = Worker(
        WorkerOptions(
            queues=["test.noop", "test.async.short"],
            batch=4,
            concurrency=2,
            poll=float(POLL),
            worker_id="two-pools",
            install_signals=False,
        )
    )
    assert worker.loop_queues == ["test.async.short"]
    thread = _in_thread(worker)
    try:
        # 60 items are ten claims of six; one wait for the poll would take a minute.
        wait_until(lambda: worker.processed >= items, timeout=30, message="the backlog drained")
    finally:
        _stopped(worker, thread)
    assert worker.succeeded == items
    assert not WorkItem.objects.filter(queue="test.noop").unsettled().exists()


def test_each_pool_decides_for_itself_a_full_event_loop_claim_goes_round_too():
    items = 40
    WorkItem.objects.enqueue_many(
        [{"queue": "test.async.short", "key": f"a-{i}", "metadata": {"seconds": "0"}} for i in range(items)]
    )
    worker = Worker(
        WorkerOptions(
            queues=["test.noop", "test.async.short"],
            batch=4,
            concurrency=2,
            async_concurrency=4,
            poll=float(POLL),
            worker_id="loop-pool",
            install_signals=False,
        )
    )
    thread = _in_thread(worker)
    try:
        wait_until(lambda: worker.processed >= items, timeout=30, message="the async backlog drained")
    finally:
        _stopped(worker, thread)
    assert worker.succeeded == items


def test_plain_runworker_on_the_whole_site_drains_a_sync_backlog_while_the_async_queues_idle(start_ready_worker):
    """The command as a site runs it: no --queue, so every registered queue — sync, async def,
    operations, the @task backends' queues — is served by one process."""
    items = 2_000
    WorkItem.objects.enqueue_many([("test.noop", f"s-{i}") for i in range(items)])
    proc = start_ready_worker("site", "--poll", POLL)
    served = set(WorkerRow.objects.get(pk="site").queues)  # what its heartbeat says it serves
    assert {"test.noop", "test.async.short", "operations"} <= served, served
    started = time.monotonic()
    wait_until(
        lambda: not WorkItem.objects.filter(queue="test.noop").unsettled().exists(),
        timeout=45,
        interval=0.2,
        message="plain runworker to drain the sync backlog",
    )
    assert time.monotonic() - started < float(POLL)  # it never waited for its backstop poll
    assert WorkItem.objects.filter(queue="test.noop", state="stopped", outcome="succeeded").count() == items
    proc.signal(signal.SIGTERM)
    assert proc.wait(30) == 0, proc.output()[-2000:]


def _connections_refused(refused: bool) -> None:
    """What a restarting server does to new sessions: refuse them (for the test database only,
    so the rest of the server, and anything else using it, carries on)."""
    import psycopg

    params = connection.get_connection_params()
    name = connection.settings_dict["NAME"]
    with psycopg.connect(**{**params, "dbname": "postgres"}, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(not refused).lower()}')


@pytest.mark.slow
def test_two_plain_runworkers_drain_items_and_operations_through_a_database_restart(start_ready_worker):
    """The reported outage: two plain runworker processes draining 3,000 items and 20
    operations lose every session and cannot open new ones for five seconds, as in a
    PostgreSQL restart; afterwards both carry on and finish everything at once. (The settler
    once gave up on a batch after three seconds of refused connections, leaving its items
    held until their 60 s leases lapsed.)"""
    import operations
    from operations.models import Operation

    keys = [f"r-{i}" for i in range(3_000)]
    ops = [operations.start("test.ops.tiers", {"units": 2, "per_unit": 10, "pause": 0.05}).id for _ in range(20)]
    workers = [start_ready_worker(f"restart-{n}", "--poll", POLL) for n in range(2)]
    WorkItem.objects.enqueue_many([("test.noop", key) for key in keys])
    wait_until(
        lambda: WorkItem.objects.filter(queue="test.noop", state="stopped").count() >= 200,
        timeout=30,
        message="the drain to get going",
    )
    _connections_refused(True)
    try:
        assert terminate_other_backends()
        time.sleep(5)  # the server is "down": every new session is refused meanwhile
    finally:
        _connections_refused(False)
    wait_until(
        lambda: not WorkItem.objects.filter(queue__in=["test.noop", "operations"]).unsettled().exists(),
        timeout=45,
        interval=0.2,
        message="both workers to finish the items and the operations after the restart",
    )
    assert WorkItem.objects.filter(queue="test.noop", outcome="succeeded").count() == len(keys)
    assert set(Operation.objects.filter(pk__in=ops).values_list("state", flat=True)) == {"succeeded"}
    for proc in workers:
        assert proc.alive(), proc.output()[-2000:]
        assert "database unavailable" in proc.output() or "listener connection lost" in proc.output()
        proc.signal(signal.SIGTERM)
    for proc in workers:
        assert proc.wait(30) == 0, proc.output()[-2000:]
