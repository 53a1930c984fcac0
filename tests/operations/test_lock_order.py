"""One lock order everywhere: the work item's row, then the operation's.

The queue settles items first and tells operations in the same transaction (claim settling a
spent item, force stop, cancel_key, hard timeout), so every writer that takes both rows takes
the item first: the runner's begin, flush, finish and release, and ``operations.cancel``.

Each test runs two writers that take both rows, each in a thread on its own connection, while
a third transaction holds one of the rows: the first writer is seen waiting, then the second,
then the holder lets go. Writers that lock in opposite orders deadlock there (PostgreSQL kills
one with DeadlockDetected); writers that agree just queue.
"""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import transaction
from django.test import override_settings

import operations
from operations import store
from operations.conf import configured_table, ops_settings
from tests.operations.conftest import begin, claim_one, items_for
from tests.operations.racing import InThread, deadlocks_so_far, is_deadlock
from tests.workqueue.conftest import side_connection
from workqueue.models import WorkItem
from workqueue.sweeps import reap as reaper

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.direct_db(
        reason="finds racing writers by server backend pid; a pooler gives a client no backend of its own"
    ),
]

PAST = "2000-01-01T00:00:00Z"


def lock_operation(op_id: str) -> str:
    return f"SELECT 1 FROM {configured_table()} WHERE id = '{op_id}' FOR UPDATE"


def lock_item(item_id: int) -> str:
    return f"SELECT 1 FROM work_items WHERE id = {item_id} FOR UPDATE"


def race(holder_sql: str, first, second) -> tuple[InThread, InThread]:
    """Hold a row with ``holder_sql``; start ``first`` and ``second`` in that order; let go."""
    before = deadlocks_so_far()
    with side_connection(autocommit=False) as holder:
        holder.execute(holder_sql)
        one = InThread(first).wait_blocked("the first writer")
        two = InThread(second).wait_blocked("the second writer")
        holder.commit()
    one.finish()
    two.finish()
    errors = [t.error for t in (one, two) if t.error is not None]
    assert not [e for e in errors if is_deadlock(e)], f"deadlock: {errors}"
    assert not errors, errors
    assert deadlocks_so_far() == before, "PostgreSQL reported a deadlock"
    return one, two


def flush_params(op_id: str, item) -> dict:
    return {
        "id": op_id,
        "item_id": item.id,
        "token": item.lease_token,
        "lease": ops_settings().lease,
        "units_total": None,
        "units_done": 0,
        "unit": "",
        "message": "",
        "count": 1,
    }


def flush(op_id: str, item):
    return lambda: store.run("op_flush", flush_params(op_id, item))


def finish(op_id: str, item):
    params = {
        **flush_params(op_id, item),
        "state": "succeeded",
        "error_code": "",
        "error_message": "",
        "error_retryable": False,
        "result_uri": "",
        "result_detail": None,
        "all_done": True,
        "cancel_wins": False,
        "attempt": "{}",
    }
    return lambda: store.run("op_finish", params)


def running() -> tuple:
    op = operations.start("test.ops.count", {})
    item, _ = begin(op.id, worker_id="runner")
    return op, item


def test_a_flush_and_a_force_stop_do_not_deadlock():
    op, item = running()
    race(lock_operation(op.id), flush(op.id, item), lambda: WorkItem.objects.force_stop([item.id]))
    assert items_for(op.id).get().outcome == "cancelled"


def test_a_flush_and_cancel_key_do_not_deadlock():
    op, item = running()
    race(lock_operation(op.id), flush(op.id, item), lambda: WorkItem.objects.cancel_key(op.id))
    assert items_for(op.id).get().outcome == "cancelled"


def test_a_finish_and_a_force_stop_do_not_deadlock():
    op, item = running()
    race(lock_operation(op.id), finish(op.id, item), lambda: WorkItem.objects.force_stop([item.id]))
    assert items_for(op.id).get().state == "stopped"


def test_a_flush_and_a_hard_timeout_do_not_deadlock():
    queues = {**settings.WORKQUEUE["QUEUES"], "operations": {"lease": 3, "hard_timeout": 60}}
    with override_settings(WORKQUEUE={**settings.WORKQUEUE, "QUEUES": queues}):
        op, item = running()
        race(lock_operation(op.id), flush(op.id, item), reap_in_one_transaction)


def reap_in_one_transaction():
    with transaction.atomic():  # as manage.py reap runs it
        return reaper.fail_hard_timeouts(now="2999-01-01T00:00:00Z")


def test_a_flush_and_a_claim_settling_the_spent_item_do_not_deadlock():
    op, item = running()
    # Its lease lapsed on its last attempt: the next claim settles it (and fails the operation).
    WorkItem.objects.filter(pk=item.id).update(lease_expires_at=PAST, attempts=5, max_attempts=5)
    race(lock_operation(op.id), flush(op.id, item), lambda: claim_one("claimer"))


def test_a_begin_and_a_force_stop_do_not_deadlock():
    op = operations.start("test.ops.count", {})
    item = claim_one("runner")
    params = {"id": op.id, "item_id": item.id, "token": item.lease_token, "lease": 3, "worker_id": "runner"}
    race(lock_operation(op.id), lambda: store.run("op_begin", params), lambda: WorkItem.objects.force_stop([item.id]))
    assert items_for(op.id).get().outcome == "cancelled"


def test_cancelling_a_pending_operation_and_a_force_stop_do_not_deadlock():
    op = operations.start("test.ops.count", {})
    item = items_for(op.id).get()
    race(lock_item(item.id), lambda: WorkItem.objects.force_stop([item.id]), lambda: operations.cancel(op.id))
    assert items_for(op.id).get().outcome == "cancelled"


def test_cancelling_a_pending_operation_and_a_begin_do_not_deadlock():
    op = operations.start("test.ops.count", {})
    item = claim_one("runner")
    params = {"id": op.id, "item_id": item.id, "token": item.lease_token, "lease": 3, "worker_id": "runner"}
    race(lock_item(item.id), lambda: store.run("op_begin", params), lambda: operations.cancel(op.id))
