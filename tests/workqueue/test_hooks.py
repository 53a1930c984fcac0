"""The items-moved hook: what it passes, and that a reason is one of ``MoveReason``."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from workqueue import hooks
from workqueue.hooks import MoveReason

# Items of a queue no app mirrors (operations' hook is registered too and looks at .queue).
A, B, C = (SimpleNamespace(queue="test.nobody", key=k) for k in "abc")


@pytest.fixture
def calls():
    seen: list[tuple[list, MoveReason]] = []

    def record(items, reason):
        seen.append((items, reason))

    hooks.on_items_moved(record)
    hooks.on_items_moved(record)  # registering twice calls it once
    yield seen
    hooks.off_items_moved(record)


def test_hooks_get_the_items_and_an_enum_reason_equal_to_its_old_string(calls):
    hooks.items_moved([A, B], MoveReason.REQUEUED)
    hooks.items_moved([C], "released")  # a plain string is taken as its MoveReason
    assert calls == [([A, B], MoveReason.REQUEUED), ([C], MoveReason.RELEASED)]
    assert calls[1][1] is MoveReason.RELEASED and calls[1][1] == "released"


def test_no_items_calls_nothing(calls):
    hooks.items_moved([], MoveReason.CANCELLED)
    assert calls == []


def test_an_unknown_reason_is_an_error_before_any_hook_runs(calls):
    with pytest.raises(ValueError, match="'settled' is not a valid MoveReason"):
        hooks.items_moved([A], "settled")
    assert calls == []


def test_off_items_moved_stops_the_calls():
    seen = []

    def record(items, reason):
        seen.append(items)

    hooks.on_items_moved(record)
    hooks.items_moved([A], MoveReason.HARD_TIMEOUT)
    hooks.off_items_moved(record)
    hooks.off_items_moved(record)  # not registered any more: nothing happens
    hooks.items_moved([B], MoveReason.HARD_TIMEOUT)
    assert seen == [[A]]


def test_a_hook_that_names_its_queues_is_asked_only_about_those():
    seen = []

    def record(items, reason):
        seen.append([i.key for i in items])

    hooks.on_items_moved(record, queues=lambda: ["test.mine"])
    try:
        assert hooks.watched(["test.mine", "test.other"]) and not hooks.watched(["test.nobody"])
        mine = SimpleNamespace(queue="test.mine", key="m")
        hooks.items_moved([A, mine], MoveReason.CANCELLED)  # it is called with its own items only
        hooks.items_moved([B], MoveReason.CANCELLED)
        assert seen == [["m"]]
    finally:
        hooks.off_items_moved(record)
    assert not hooks.watched(["test.mine"])


def test_a_hook_that_names_no_queues_watches_every_queue(calls):
    assert hooks.watched(["test.nobody"])


def _claim_transaction_states(queue: str) -> list[bool]:
    """Whether item_claim ran inside a transaction, for a claim on ``queue``."""
    from django.db import connection

    from workqueue.models import WorkItem

    states = []

    def spy(execute, sql, params, many, context):
        if params and isinstance(params, dict) and "worker_id" in params and "leases" in params:
            states.append(connection.in_atomic_block)
        return execute(sql, params, many, context)

    WorkItem.objects.enqueue(queue, "k")
    with connection.execute_wrapper(spy):
        WorkItem.objects.claim([queue], limit=5, worker_id="w", relaxed=True)
    return states


@pytest.mark.django_db(transaction=True)
def test_a_claim_a_hook_watches_runs_in_a_transaction_for_it(calls):
    # An unfiltered hook (``calls``) may be told about spent items the claim settles: inside
    # the claim's transaction.
    assert _claim_transaction_states("test.noop") == [True]


@pytest.mark.django_db(transaction=True)
def test_a_claim_on_a_queue_no_hook_watches_is_a_statement_of_its_own():
    # operations' hook names the operations queues; test.noop is not one of them, so the
    # claim needs no BEGIN and COMMIT around its one statement.
    assert _claim_transaction_states("test.noop") == [False]
