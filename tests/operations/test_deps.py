"""Dependencies, ``start(..., after=[ids])``, run in this process by the real handler
(operations.dependencies). The runworker proofs are in test_deps_processes.py."""

from __future__ import annotations

import datetime as dt
import json
import threading

import pytest
from django.db import connections, transaction
from django.utils import timezone

import operations
from operations import deps, service, store
from operations.models import Operation, OperationDependency
from tests.conftest import statements_run
from tests.operations.conftest import begin, claim_one, items_for, op_row, run_next
from tests.testapp.models import OperationRun
from workqueue.models import WorkItem

pytestmark = pytest.mark.django_db(transaction=True)

CHILD = "test.ops.batch.child"


def drain(limit: int = 100) -> int:
    n = 0
    while run_next() is not None:
        n += 1
        assert n < limit
    return n


def began(op_id: str) -> int:
    return OperationRun.objects.filter(op_id=op_id, event="began").count()


def diamond(b_kind: str = CHILD, b_request: dict | None = None):
    a = operations.start(CHILD, {"n": 1})
    b = operations.start(b_kind, b_request or {"n": 2}, after=[a.id])
    c = operations.start(CHILD, {"n": 3}, after=[a.id])
    d = operations.start(CHILD, {"n": 4}, after=[b.id, c.id])
    return a, b, c, d


def test_a_diamond_runs_d_exactly_once_after_both_b_and_c():
    a, b, c, d = diamond()
    assert (b.state, b.deps_open, d.deps_open) == ("pending", 1, 2)
    assert op_row(a.id).has_dependents and not op_row(d.id).has_dependents
    # Only A can be claimed: the dependents have no work item.
    assert [items_for(x.id).count() for x in (a, b, c, d)] == [1, 0, 0, 0]
    assert run_next().key == a.id
    assert [items_for(x.id).count() for x in (b, c, d)] == [1, 1, 0]
    assert run_next().key in (b.id, c.id)
    assert op_row(d.id).deps_open == 1 and not items_for(d.id).exists()
    assert run_next().key in (b.id, c.id)
    assert op_row(d.id).deps_open == 0 and items_for(d.id).count() == 1
    assert run_next().key == d.id
    assert run_next() is None
    rows = {x.id: op_row(x.id) for x in (a, b, c, d)}
    assert all(r.state == "succeeded" for r in rows.values())
    assert began(d.id) == 1 and items_for(d.id).count() == 1
    assert rows[d.id].started_at > max(rows[b.id].finished_at, rows[c.id].finished_at)
    assert OperationDependency.objects.filter(decided=False).count() == 0


def test_a_failed_b_ends_d_dependency_failed_naming_b_and_d_never_runs():
    _a, b, c, d = diamond("test.ops.batch.doomed", {"why": "b is broken"})
    drain()
    assert op_row(b.id).state == "failed" and op_row(c.id).state == "succeeded"
    d = op_row(d.id)
    assert (d.state, d.error_code, d.error_retryable) == ("failed", "dependency_failed", False)
    assert f"dependency {b.id} ended failed (doomed)" in d.error_message
    assert d.finished_at is not None and d.error.code == "dependency_failed"
    assert began(d.id) == 0 and not items_for(d.id).exists()


def test_a_failed_root_fails_every_dependent_transitively_in_its_own_transaction():
    a = operations.start("test.ops.batch.doomed", {})
    b = operations.start(CHILD, {}, after=[a.id])
    c = operations.start(CHILD, {}, after=[a.id])
    d = operations.start(CHILD, {}, after=[b.id, c.id])
    e = operations.start(CHILD, {}, after=[d.id])
    assert run_next().key == a.id
    assert run_next() is None  # nothing else was ever claimable
    for x in (b, c, d, e):
        row = op_row(x.id)
        assert (row.state, row.error_code) == ("failed", "dependency_failed"), x.id
        assert not items_for(x.id).exists()
    assert op_row(d.id).finished_at == op_row(a.id).finished_at == op_row(e.id).finished_at
    assert f"dependency {d.id} ended failed (dependency_failed)" in op_row(e.id).error_message


def test_dependencies_already_ended_are_counted_at_start():
    ok = operations.start(CHILD, {})
    bad = operations.start("test.ops.batch.doomed", {})
    off = operations.start(CHILD, {}, delay=3600)
    drain()
    operations.cancel(off.id)
    ready = operations.start(CHILD, {}, after=[ok.id])
    assert (ready.state, ready.deps_open, ready.created) == ("pending", 0, True)
    assert items_for(ready.id).count() == 1 and not op_row(ok.id).has_dependents
    failed = operations.start(CHILD, {}, after=[ok.id, bad.id])
    assert (failed.state, failed.error_code, failed.created) == ("failed", "dependency_failed", True)
    assert f"dependency {bad.id} ended failed (doomed)" in failed.error_message
    cancelled = operations.start(CHILD, {}, after=[off.id])
    assert cancelled.state == "failed" and f"dependency {off.id} ended cancelled" in cancelled.error_message
    assert not items_for(failed.id).exists() and not items_for(cancelled.id).exists()
    # Edges onto ended operations are recorded, as counted.
    assert OperationDependency.objects.filter(op_id=failed.id, decided=True).count() == 2
    assert deps.recover()["dependencies_decided"] == 0
    assert run_next().key == ready.id and run_next() is None


def test_after_validates_ids_collapses_duplicates_and_writes_nothing_on_an_unknown_one():
    a = operations.start(CHILD, {})
    before = (Operation.objects.count(), WorkItem.objects.count(), OperationDependency.objects.count())
    with pytest.raises(operations.UnknownDependency) as err:
        operations.start(CHILD, {}, after=[a.id, "op_nope"])
    assert isinstance(err.value, operations.InvalidRequest) and err.value.missing == ["op_nope"]
    assert "'op_nope'" in str(err.value) and "Start the dependencies first" in str(err.value)
    with pytest.raises(operations.InvalidRequest, match="cannot be combined"):
        operations.start(CHILD, {}, after=[a.id], delay=5)
    with pytest.raises(operations.InvalidRequest, match="list of operation ids"):
        operations.start(CHILD, {}, after=a.id)
    assert (Operation.objects.count(), WorkItem.objects.count(), OperationDependency.objects.count()) == before
    assert not op_row(a.id).has_dependents
    twice = operations.start(CHILD, {}, after=[a.id, a, a.id])
    assert twice.deps_open == 1 and operations.dependencies(twice.id) == [a.id]
    plain = operations.start(CHILD, {}, after=[])
    assert plain.deps_open == 0 and items_for(plain.id).count() == 1
    # The same id again returns the existing operation, writing no second edge.
    again = operations.start(CHILD, {}, after=[a.id], id=twice.id)
    assert again.created is False and OperationDependency.objects.filter(op_id=twice.id).count() == 1


def test_dependencies_and_dependents_read_the_graph():
    a, b, c, d = diamond()
    assert operations.dependencies(d.id) == sorted([b.id, c.id])
    assert operations.dependents(a.id) == sorted([b.id, c.id])
    assert operations.dependencies(a.id) == [] and operations.dependents(d.id) == []
    with pytest.raises(operations.OperationNotFound):
        operations.dependencies("op_nope")


def test_cancelling_a_waiting_dependent_cancels_it_and_its_dependency_s_end_leaves_it_so():
    a = operations.start(CHILD, {})
    b = operations.start(CHILD, {}, after=[a.id])
    c = operations.start(CHILD, {}, after=[b.id])
    b = operations.cancel(b.id)
    assert b.state == "cancelled"
    # Its own dependent fails at once, in the cancel's transaction.
    c = op_row(c.id)
    assert (c.state, c.error_code) == ("failed", "dependency_failed")
    assert f"dependency {b.id} ended cancelled" in c.error_message
    assert run_next().key == a.id and run_next() is None
    assert op_row(b.id).state == "cancelled" and not items_for(b.id).exists()
    assert not OperationDependency.objects.filter(decided=False).exists()


def test_recover_never_re_offers_a_dependent_that_is_still_waiting():
    a = operations.start(CHILD, {}, delay=3600)
    b = operations.start(CHILD, {}, after=[a.id])
    later = timezone.now() + dt.timedelta(days=1)
    assert service.recover(now=later) == {"reoffered": 0}
    assert not items_for(b.id).exists() and op_row(b.id).state == "pending"
    # Once its dependency runs and succeeds, it runs.
    WorkItem.objects.filter(key=a.id).update(run_after=timezone.now())
    drain()
    assert op_row(b.id).state == "succeeded"


def test_a_dependency_that_gains_a_dependent_while_it_runs_decides_it_right_after_its_end():
    a = operations.start("test.ops.deps.spawn", {})
    assert run_next().key == a.id
    a = op_row(a.id)
    dependent = a.result_detail["dependent"]
    assert a.state == "succeeded" and a.has_dependents
    # Started while A ran, so it waited; A's end (the runner's follow-up) enqueued it.
    assert op_row(dependent).deps_open == 0 and items_for(dependent).count() == 1
    assert run_next().key == dependent and op_row(dependent).state == "succeeded"


def test_a_lost_decision_is_made_by_recover_once_and_a_repeated_hook_counts_nothing_twice():
    a = operations.start(CHILD, {})
    b = operations.start(CHILD, {}, after=[a.id])
    x = operations.start(CHILD, {}, delay=3600)  # D's other dependency, not due yet
    d = operations.start(CHILD, {}, after=[b.id, x.id])
    assert run_next().key == a.id
    item, _op = begin(b.id)
    # B's end written without its decision (a crash between the runner's two transactions).
    store.finish(
        id=b.id,
        item_id=item.id,
        token=item.lease_token,
        progress={"units_total": None, "units_done": 0, "unit": "", "message": "", "count": 0},
        state="succeeded",
        error_code="",
        error_message="",
        error_retryable=False,
        result_uri="",
        result_detail=None,
        all_done=True,
        cancel_wins=False,
        attempt=json.dumps({}),
    )
    assert op_row(b.id).state == "succeeded" and op_row(d.id).deps_open == 2
    assert deps.recover() == {"dependencies_decided": 1}
    assert op_row(d.id).deps_open == 1
    # Again, and the hook by hand twice: B's edge was counted, never again.
    assert deps.recover() == {"dependencies_decided": 0}
    with transaction.atomic():
        deps.ended([b.id, b.id])
    deps.ended([b.id])
    assert op_row(d.id).deps_open == 1 and not items_for(d.id).exists()
    WorkItem.objects.filter(key=x.id).update(run_after=timezone.now())
    drain()
    assert op_row(d.id).state == "succeeded" and began(d.id) == 1 and items_for(d.id).count() == 1


def test_a_batch_can_be_a_dependency_its_fan_in_decides_the_dependent():
    bat = operations.batch(CHILD, [{"n": 1}, {"n": 2}])
    after = operations.start(CHILD, {"n": 9}, after=[bat.id])
    kids = [k.id for k in Operation.objects.children_of(bat.id)]
    assert run_next().key in kids
    assert not items_for(after.id).exists()
    assert run_next().key in kids
    assert op_row(bat.id).state == "succeeded" and items_for(after.id).count() == 1
    drain()
    assert op_row(after.id).state == "succeeded"


def test_reap_deletes_the_edges_of_reaped_operations():
    diamond()
    drain()
    keep = operations.start(CHILD, {}, delay=3600)
    waiting = operations.start(CHILD, {}, after=[keep.id])
    assert OperationDependency.objects.count() == 5
    assert service.reap(now=timezone.now() + dt.timedelta(days=400))["deleted"] == 4
    assert list(OperationDependency.objects.values_list("op_id", "after_id")) == [(waiting.id, keep.id)]


def _end_in_open_transaction(op_id: str, ready: threading.Event, go: threading.Event) -> None:
    """End ``op_id`` (cancel, the hook included) in a transaction held open until ``go``."""
    try:
        with transaction.atomic():
            service.cancel(op_id)
            ready.set()
            go.wait(10)
    finally:
        connections.close_all()


def test_a_start_that_races_its_dependency_s_end_is_serialised_with_it():
    # The dependency ends in a transaction still open: the start waits for its row lock,
    # then sees it ended (and fails at once), never a waiting edge nobody will decide.
    a = operations.start(CHILD, {}, delay=3600)
    ready, go = threading.Event(), threading.Event()
    t = threading.Thread(target=_end_in_open_transaction, args=(a.id, ready, go))
    t.start()
    assert ready.wait(10)
    result = {}

    def start_b():
        try:
            result["b"] = operations.start(CHILD, {}, after=[a.id])
        finally:
            connections.close_all()

    s = threading.Thread(target=start_b)
    s.start()
    s.join(0.5)
    assert s.is_alive(), "the start did not wait for the dependency's row lock"
    go.set()
    t.join(10)
    s.join(10)
    b = result["b"]
    assert (b.state, b.error_code) == ("failed", "dependency_failed")
    assert not OperationDependency.objects.filter(decided=False).exists()


def test_an_end_that_races_a_start_after_it_sees_the_new_edge():
    # The start holds the dependency's row lock (transaction open); the end waits for it,
    # then its decision, a statement later, sees the committed edge.
    a = operations.start(CHILD, {}, delay=3600)
    with transaction.atomic():
        b = operations.start(CHILD, {}, after=[a.id])
        t = threading.Thread(target=lambda: (service.cancel(a.id), connections.close_all()))
        t.start()
        t.join(0.5)
        assert t.is_alive(), "the end did not wait for the start's lock"
    t.join(10)
    b = op_row(b.id)
    assert (b.state, b.error_code) == ("failed", "dependency_failed")
    assert OperationDependency.objects.get(op_id=b.id).decided


def test_a_work_item_enqueued_by_hand_for_a_waiting_dependent_does_not_run_it():
    a = operations.start(CHILD, {}, delay=3600)
    b = operations.start(CHILD, {}, after=[a.id])
    WorkItem.objects.enqueue("operations", b.id)
    assert run_next().key == b.id  # claimed, refused by begin, settled as a no-op
    b = op_row(b.id)
    assert (b.state, b.attempts, b.deps_open) == ("pending", 0, 1) and began(b.id) == 0
    assert not WorkItem.objects.filter(key=b.id).unsettled().exists()


def _statements_of_one_run() -> list[str]:
    with statements_run() as sent:
        assert run_next() is not None
    return sent


def test_the_end_of_an_operation_without_dependents_or_parent_runs_no_decision_and_a_dependency_s_does():
    operations.start(CHILD, {})
    plain = _statements_of_one_run()
    assert not [s for s in plain if "SET decided = true" in s or "SET fanned_in = true" in s]
    a = operations.start(CHILD, {})
    operations.start(CHILD, {}, after=[a.id])
    depended = _statements_of_one_run()
    assert sum("SET decided = true" in s for s in depended) == 1
    # A has no parent: its hook runs the decision only, no fan-in.
    assert not [s for s in depended if "SET fanned_in = true" in s]


def _finish_by_hand(item, op_id: str) -> None:
    """The runner's end of a run it holds (op_finish) and the hook, in the caller's transaction."""
    written = store.finish(
        id=op_id,
        item_id=item.id,
        token=item.lease_token,
        progress={"units_total": None, "units_done": 0, "unit": "", "message": "", "count": 0},
        state="succeeded",
        error_code="",
        error_message="",
        error_retryable=False,
        result_uri="",
        result_detail=None,
        all_done=True,
        cancel_wins=False,
        attempt=json.dumps({}),
    )
    assert written is not None
    deps.ended([written])


def test_two_last_dependencies_ending_at_once_both_count_and_the_dependent_is_enqueued_once():
    b = operations.start(CHILD, {})
    c = operations.start(CHILD, {})
    d = operations.start(CHILD, {}, after=[b.id, c.id])
    held = {}
    for _ in range(2):
        item = claim_one()
        held[item.key] = item
        assert store.begin(id=item.key, item_id=item.id, token=item.lease_token, lease=60, worker_id="t") is not None
    ready, go = threading.Event(), threading.Event()

    def end_b():
        try:
            with transaction.atomic():
                _finish_by_hand(held[b.id], b.id)
                ready.set()
                go.wait(10)
        finally:
            connections.close_all()

    def end_c():
        try:
            with transaction.atomic():
                _finish_by_hand(held[c.id], c.id)
        finally:
            connections.close_all()

    tb = threading.Thread(target=end_b)
    tb.start()
    assert ready.wait(10)
    tc = threading.Thread(target=end_c)
    tc.start()
    tc.join(0.5)
    assert tc.is_alive(), "C's decision did not wait for D's row lock held by B's"
    go.set()
    tb.join(10)
    tc.join(10)
    d = op_row(d.id)
    assert (d.state, d.deps_open) == ("pending", 0)
    assert items_for(d.id).count() == 1
    assert run_next().key == d.id and run_next() is None and began(d.id) == 1
