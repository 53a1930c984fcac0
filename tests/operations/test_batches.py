"""Batches and chains, run in this process by the real handler (operations.batches).

The process-level proofs (runworker subprocesses, SIGKILL) are in test_batch_processes.py.
"""

from __future__ import annotations

import pytest

import operations
from operations.models import Operation
from tests.operations.conftest import op_row, run_next

pytestmark = pytest.mark.django_db(transaction=True)


def drain(limit: int = 500) -> int:
    n = 0
    while run_next() is not None:
        n += 1
        assert n < limit
    return n


def test_a_batch_starts_its_children_and_ends_when_its_last_child_does():
    b = operations.batch(
        "test.ops.batch.child", [{"n": i} for i in range(1, 6)], then=("test.ops.batch.then", {"tag": "x"})
    )
    assert b.kind == "operations.batch" and b.state == "running" and b.children_total == 5
    kids = list(Operation.objects.children_of(b.id))
    assert [k.position for k in kids] == [0, 1, 2, 3, 4]
    assert drain() == 6
    b = op_row(b.id)
    assert b.state == "succeeded", (b.state, b.error_message)
    assert (b.units_total, b.units_done, b.count) == (5, 5, 15)
    cb = Operation.objects.get(follows_id=b.id)
    assert cb.state == "succeeded"
    assert cb.result_detail == {
        "parent": b.id,
        "parent_state": "succeeded",
        "states": {"succeeded": 5},
        "rows": 15,
        "tag": "x",
    }


def test_a_chain_runs_its_steps_in_order_each_reading_the_previous_result():
    c = operations.chain(
        [("test.ops.chain.add", {"add": 1}), ("test.ops.chain.add", {"add": 10}), ("test.ops.chain.add", {"add": 100})]
    )
    assert Operation.objects.children_of(c.id).count() == 1
    drain()
    c = op_row(c.id)
    steps = list(Operation.objects.children_of(c.id))
    assert [s.result_detail["total"] for s in steps] == [1, 11, 111]
    assert c.state == "succeeded" and c.result_detail["total"] == 111


def counts() -> tuple[int, int]:
    from workqueue.models import WorkItem

    return Operation.objects.count(), WorkItem.objects.count()


@pytest.mark.parametrize(
    "call",
    [
        lambda: operations.batch("test.ops.batch.child", [{"n": 1}, {"n": object()}]),
        lambda: operations.batch([("test.ops.batch.child", {}), ("no.such.kind", {})]),
        lambda: operations.batch("test.ops.batch.child", []),
        lambda: operations.batch("test.ops.batch.child", {"n": 1}),
        lambda: operations.batch("test.ops.batch.child", [{}], then=("no.such.kind", {})),
        lambda: operations.batch("test.ops.batch.child", [{}], then=("test.ops.batch.then", {}), then_on="sometimes"),
        lambda: operations.batch("test.ops.batch.child", [{}], then_on=["finished"], then=("test.ops.batch.then", {})),
        lambda: operations.batch([("operations.batch", {})]),
        lambda: operations.batch("test.ops.batch.child", [{}], group=""),
        lambda: operations.batch("test.ops.batch.child", [{}], group="tenant\x00"),  # as start(group=) refuses
        lambda: operations.chain([("test.ops.chain.add", {})], priority=2**31),
        lambda: operations.chain([("test.ops.chain.add", {})], owner="x" * 201),
        lambda: operations.batch("test.ops.batch.child", [{}], queue="nope"),
        lambda: operations.chain([]),
        lambda: operations.chain([("test.ops.chain.add",)]),
        lambda: operations.chain("test.ops.chain.add"),
        lambda: operations.children("op_missing"),
    ],
)
def test_bad_input_is_a_clear_error_and_writes_nothing(call):
    before = counts()
    with pytest.raises(operations.OperationsError) as info:
        call()
    assert str(info.value)
    assert counts() == before


def test_the_batch_owner_owns_its_children_and_an_id_makes_batch_idempotent():
    b = operations.batch("test.ops.batch.child", [{"n": 1}, {"n": 2}], owner="ada", id="nightly-2026-12-01")
    assert b.created and b.id == "nightly-2026-12-01"
    assert {c.owner for c in Operation.objects.children_of(b.id)} == {"ada"}
    again = operations.batch("test.ops.batch.child", [{"n": 1}, {"n": 2}], owner="ada", id="nightly-2026-12-01")
    assert not again.created and again.id == b.id
    assert Operation.objects.filter(parent_id=b.id).count() == 2
    with pytest.raises(operations.DuplicateOperation):
        operations.batch("test.ops.batch.child", [{"n": 1}], owner="bob", id="nightly-2026-12-01")
    page, after = operations.children(b.id, owner="ada", limit=1)
    assert [c.position for c in page] == [0] and after == 0
    page, after = operations.children(b.id, owner="ada", after=after, limit=1)
    assert [c.position for c in page] == [1] and after is None
    with pytest.raises(operations.OperationNotFound):
        operations.children(b.id, owner="bob")


def test_a_batch_in_the_callers_transaction_is_gone_when_it_rolls_back():
    from django.db import transaction

    before = counts()
    with pytest.raises(RuntimeError), transaction.atomic():
        operations.batch("test.ops.batch.child", [{"n": 1}] * 3, then=("test.ops.batch.then", {}))
        raise RuntimeError("the caller changed its mind")
    assert counts() == before


def test_then_on_succeeded_does_not_start_then_when_the_batch_fails():
    b = operations.batch(
        [("test.ops.batch.child", {}), ("test.ops.batch.doomed", {})],
        then=("test.ops.batch.then", {}),
        then_on="succeeded",
    )
    drain()
    assert op_row(b.id).state == "failed"
    assert not Operation.objects.filter(follows_id=b.id).exists()


def test_then_on_always_starts_then_when_the_batch_is_cancelled():
    b = operations.batch("test.ops.batch.child", [{}] * 3, then=("test.ops.batch.then", {}), then_on="always")
    operations.cancel(b.id)
    assert op_row(b.id).state == "cancelled"
    [then] = Operation.objects.filter(follows_id=b.id)
    drain()
    assert op_row(then.id).result_detail["parent_state"] == "cancelled"


def test_cancelling_one_child_does_not_cancel_its_siblings():
    b = operations.batch("test.ops.batch.child", [{"n": 1}] * 3, then=("test.ops.batch.then", {}))
    first = Operation.objects.children_of(b.id).first()
    assert operations.cancel(first.id).state == "cancelled"
    assert [c.state for c in Operation.objects.children_of(b.id)] == ["cancelled", "pending", "pending"]
    assert op_row(b.id).state == "running" and not op_row(b.id).cancel_requested
    drain()
    b = op_row(b.id)
    # Not every child succeeded and none failed: the batch says it was (partly) cancelled.
    assert b.state == "cancelled" and b.child_counts()["succeeded"] == 2
    assert not Operation.objects.filter(follows_id=b.id).exists()  # then: succeeded or failed by default


def test_cancelling_a_chain_stops_its_current_step_and_starts_no_more():
    c = operations.chain([("test.ops.chain.add", {"add": 1}), ("test.ops.chain.add", {"add": 2})])
    operations.cancel(c.id)
    c = op_row(c.id)
    assert c.state == "cancelled" and [s.state for s in Operation.objects.children_of(c.id)] == ["cancelled"]
    assert run_next() is None


def test_two_last_children_ending_at_once_settle_the_parent_exactly_once():
    """The race a scan of siblings loses: each child's fan-in waits on the parent's row lock."""
    import threading

    from operations import runner
    from tests.operations.conftest import begin, in_thread, reporter_for

    for _ in range(5):
        b = operations.batch("test.ops.batch.child", [{"n": 1}, {"n": 2}], then=("test.ops.batch.then", {}))
        held = [begin(op_id) for op_id in Operation.objects.children_of(b.id).values_list("id", flat=True)]
        barrier = threading.Barrier(2)

        def finish(item, op, barrier=barrier):
            reporter = reporter_for(item, op)
            reporter.operation = op
            common = {"id": op.id, "item_id": item.id, "token": item.lease_token}
            barrier.wait(10)
            runner._finish(reporter, common, state="succeeded", all_done=True)
            reporter.close()

        threads = [in_thread(finish, item, op) for item, op in held]
        for t in threads:
            t.join(30)
        b = op_row(b.id)
        assert b.state == "succeeded" and b.child_counts()["succeeded"] == 2
        assert Operation.objects.filter(follows_id=b.id).count() == 1
        drain()


def test_a_child_is_counted_on_its_parent_once_however_often_its_fan_in_runs():
    """The fan-in runs in every write that ends an operation and in recover's repair, so it may
    meet an ended child again: the second time it must not count it (the parent of two would
    end with one child still running)."""
    from django.db import transaction

    from operations import store
    from workqueue.conf import wq_settings

    b = operations.batch("test.ops.batch.child", [{"n": 1}, {"n": 2}])
    assert run_next() is not None  # one child ends (its own fan-in counts it)
    states = dict(Operation.objects.children_of(b.id).values_list("id", "state"))
    (ended,) = [op_id for op_id, state in states.items() if state == "succeeded"]
    assert sorted(states.values()) == ["pending", "succeeded"]
    with transaction.atomic():
        assert store.fan_in([ended], queue_channel=wq_settings().notify_channel) == []  # already counted
    b = op_row(b.id)
    assert (b.state, b.child_counts()["succeeded"]) == ("running", 1)
    drain()
    assert op_row(b.id).state == "succeeded" and op_row(b.id).child_counts()["succeeded"] == 2


def test_recover_and_reap_leave_a_running_batch_alone():
    b = operations.batch("test.ops.batch.child", [{"n": 1}])
    from operations import sweeps

    assert sweeps.recover_sweep()["fanned_in"] == 0
    Operation.objects.filter(pk=b.id).update(updated_at="2000-01-01T00:00:00Z")
    sweeps.recover_sweep()
    operations.reap()
    assert op_row(b.id).state == "running"
    drain()
    assert op_row(b.id).state == "succeeded"


def test_the_group_reaches_every_work_item_a_batch_or_chain_starts():
    """group= lands on the children's, the later steps' and the then's work items (group_key), so
    max_running_per_group caps a tenant's batch like its plain operations."""
    from workqueue.models import WorkItem

    b = operations.batch("test.ops.batch.child", [{"n": 1}, {"n": 2}], then=("test.ops.batch.then", {}), group="t-1")
    c = operations.chain([("test.ops.chain.add", {"add": 1}), ("test.ops.chain.add", {"add": 2})], group="t-2")
    kids = [k.id for k in Operation.objects.children_of(b.id)]
    assert set(WorkItem.objects.filter(key__in=kids).values_list("group_key", flat=True)) == {"t-1"}
    drain()
    then = Operation.objects.get(follows_id=b.id)
    steps = [s.id for s in Operation.objects.children_of(c.id)]
    assert len(steps) == 2
    assert WorkItem.objects.get(key=then.id).group_key == "t-1"
    assert set(WorkItem.objects.filter(key__in=steps).values_list("group_key", flat=True)) == {"t-2"}
