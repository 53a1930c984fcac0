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
