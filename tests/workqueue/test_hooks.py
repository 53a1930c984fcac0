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
