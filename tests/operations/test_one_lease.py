"""An operation and its work item hold one lease: a write by the runner lands on both rows or on
neither, and only while the runner still holds the work item.

Every test here is transactional: the racing statements run on other threads' connections,
which see only committed rows.
"""

from __future__ import annotations

import pytest
from django.db import transaction

import operations
from operations import store
from operations.conf import ops_settings
from operations.models import Operation
from tests.operations.conftest import begin, claim_one, items_for, op_row, run_next
from tests.operations.racing import InThread
from tests.testapp.models import OperationRun
from workqueue.models import WorkItem

pytestmark = pytest.mark.django_db(transaction=True)

PAST = "2000-01-01T00:00:00Z"


def lapse(op_id: str, item_id: int) -> None:
    """The runner went silent for a whole lease: both halves of the lease lapse (pinned, not slept)."""
    WorkItem.objects.filter(pk=item_id).update(lease_expires_at=PAST)
    Operation.objects.filter(pk=op_id).update(claimed_until=PAST)


def flush(op_id: str, item) -> list[tuple]:
    return store.run(
        "op_flush",
        {
            "id": op_id,
            "item_id": item.id,
            "token": item.lease_token,
            "lease": ops_settings().lease,
            "units_total": None,
            "units_done": 0,
            "unit": "",
            "message": "",
            "count": 1,
        },
    )


def begin_params(op_id: str, item, worker_id: str) -> dict:
    return {
        "id": op_id,
        "item_id": item.id,
        "token": item.lease_token,
        "lease": ops_settings().lease,
        "worker_id": worker_id,
    }


def test_a_flush_after_another_worker_claimed_the_item_is_not_held_and_the_claimant_begins():
    op = operations.start("test.ops.count", {})
    stale_item, _began = begin(op.id, worker_id="stale")
    lapse(op.id, stale_item.id)
    heir_item = claim_one("heir")  # the lapsed item is reclaimed under a new proof
    assert heir_item is not None and heir_item.id == stale_item.id and heir_item.reclaimed

    # The silent runner wakes up and flushes under its old proof: it holds nothing any more.
    assert flush(op.id, stale_item) == []
    row = op_row(op.id)
    assert row.claimed_until.isoformat().startswith("2000-01-01"), "the stale flush extended the operation"

    # So the claimant's begin takes the operation (one lease: the item and the row move together).
    began = store.run("op_begin", begin_params(op.id, heir_item, "heir"))
    assert began, "the claimant's begin was refused"
    row = op_row(op.id)
    item = items_for(op.id).get()
    assert (row.state, row.worker_id, row.attempts) == ("running", "heir", 2)
    assert row.lease_token == item.lease_token == heir_item.lease_token
    assert row.claimed_until == item.lease_expires_at


@pytest.mark.direct_db(
    reason="finds racing writers by server backend pid; a pooler gives a client no backend of its own"
)
def test_a_begin_racing_an_operators_requeue_takes_neither_row():
    op = operations.start("test.ops.count", {})
    item = claim_one("racer")
    with transaction.atomic():
        # The operator's requeue has revoked the item's proof but not committed yet...
        WorkItem.objects.requeue_now([item.id])
        # ...when the holder's begin runs: it must wait for the item, not take the operation first.
        racer = InThread(lambda: store.run("op_begin", begin_params(op.id, item, "racer")))
        racer.wait_blocked("the begin")
    assert racer.join() == [], "begin took the operation although its work item was requeued"
    row = op_row(op.id)
    assert (row.state, row.attempts, row.lease_token) == ("pending", 0, None)
    # The requeued item goes to the next worker, whose begin is not refused.
    assert run_next("next") is not None
    assert op_row(op.id).state == "succeeded"


def test_a_cancel_requested_while_the_runner_was_dead_is_settled_at_the_next_begin():
    # The run never looks at the cancellation: only begin can honour it.
    op = operations.start("test.ops.hold", {"seconds": 1.5, "honour_cancel": False})
    item, _began = begin(op.id, worker_id="dead")
    flagged = operations.cancel(op.id)
    assert (flagged.state, flagged.cancel_requested) == ("running", True)
    lapse(op.id, item.id)  # its runner died before it could see the flag

    assert run_next("next") is not None
    done = op_row(op.id)
    assert (done.state, done.done, done.cancel_requested, done.error) == ("cancelled", True, True, None)
    assert done.attempts == 1  # no attempt charged for a run that never started
    assert not OperationRun.objects.filter(op_id=op.id).exists()  # and it never ran
    assert done.lease_token is None and done.claimed_until is None and done.finished_at is not None
    settled = items_for(op.id).get()
    assert (settled.state, settled.outcome, settled.lease_token) == ("stopped", "cancelled", None)
