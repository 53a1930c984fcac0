"""The worker's ledger settles a batch in one step with the same accounting as one by one."""

from __future__ import annotations

import datetime as dt

from workqueue.items import Item
from workqueue.worker.lease import LeaseKeeper
from workqueue.worker.ledger import Ledger
from workqueue.worker.loop import Signal


def _item(n: int) -> Item:
    now = dt.datetime.now(dt.UTC)
    return Item(n, f"work_{n}", "q", f"k{n}", None, "active", None, 0, now, 1, 5, None, now, False)


def test_finished_many_counts_settled_and_lost_drops_the_holds_and_wakes_the_claim_loop_once():
    keeper = LeaseKeeper(tick=60)  # nothing is due within the test: the keeper never renews
    wake = Signal()
    ledger = Ledger(keeper, wake, max_inflight=6, refill_at=3)
    try:
        holds = keeper.hold_many([_item(n) for n in range(6)], lease=300, started=False)
        ledger.claimed(holds)
        assert ledger.free() == 0  # 6 in flight, above refill_at
        lost = {id(holds[1].item)}
        ledger.finished_many(holds[:4], lost)
        assert (ledger.inflight, ledger.processed, ledger.succeeded, ledger.failed) == (2, 4, 3, 1)
        assert keeper.holds() == holds[4:]
        assert wake.wait(0)  # capacity freed: the claim loop is woken
        assert not wake.wait(0)  # once
        ledger.finished_many(holds[:4], set())  # already accounted for: nothing changes
        ledger.finished(holds[0], ok=True)
        assert (ledger.inflight, ledger.processed, ledger.succeeded, ledger.failed) == (2, 4, 3, 1)
        assert not wake.wait(0)
        ledger.finished_many(holds[4:], set())
        assert (ledger.inflight, ledger.processed, ledger.succeeded) == (0, 6, 5)
        assert keeper.holds() == [] and ledger.free() == 6
    finally:
        keeper.close()


def test_finished_many_frees_the_event_loops_lane_too():
    """A batch settled for coroutines gives their slots back to the loop's lane (the claim loop
    would otherwise stop claiming for async queues once max_on_loop items had ever run)."""
    keeper = LeaseKeeper(tick=60)
    wake = Signal()
    ledger = Ledger(keeper, wake, max_inflight=4, refill_at=2, max_on_loop=4, loop_refill_at=2)
    try:
        holds = keeper.hold_many([_item(n) for n in range(4)], lease=300, started=False)
        ledger.claimed(holds, ledger.loop)
        assert ledger.free(ledger.loop) == 0
        ledger.finished_many(holds, set())
        assert (ledger.inflight, ledger.on_loop, ledger.processed) == (0, 0, 4)
        assert ledger.free(ledger.loop) == 4 and ledger.free() == 4
        assert wake.wait(0)
    finally:
        keeper.close()


def test_capacity_freed_wakes_the_claim_loop_only_when_it_found_none():
    """A claim loop that found room (its queue simply ran dry) waits for a NOTIFY or its poll:
    each finished item waking it would mean an empty claim per item (two per operation, with
    the enqueue's NOTIFY). One that found the lane full is woken as soon as room frees up."""
    keeper = LeaseKeeper(tick=60)
    wake = Signal()
    ledger = Ledger(keeper, wake, max_inflight=6, refill_at=3)
    try:
        holds = keeper.hold_many([_item(n) for n in range(6)], lease=300, started=False)
        ledger.claimed(holds[:2])
        assert ledger.free() == 4  # room left: the claim loop claims, finds the queue empty, waits
        ledger.finished(holds[0], ok=True)
        assert not wake.wait(0)  # nothing new to claim because one item finished
        ledger.claimed(holds[2:])
        assert ledger.free() == 0  # full: now it waits for room
        ledger.finished(holds[1], ok=True)  # 4 in flight, still above refill_at: no room yet
        assert not wake.wait(0)
        ledger.finished_many(holds[2:4], set())
        assert wake.wait(0)  # room: woken
        assert ledger.free() == 4
        ledger.finished_many(holds[4:], set())
        assert not wake.wait(0)  # it found room at its last look: not woken again
    finally:
        keeper.close()


def test_items_waiting_for_the_settler_leave_room_for_the_next_claim():
    """A handler that returned leaves its item to the settler's next batch; it needs no runner
    any more, so the claim loop may claim in its place while that batch is settled (the claim
    and the settle overlap instead of taking turns). Not without bound: at most max_inflight
    more than the runners' share may wait to be settled."""
    from workqueue.worker.context import Context
    from workqueue.worker.settler import Settler

    keeper = LeaseKeeper(tick=60)
    wake = Signal()
    ledger = Ledger(keeper, wake, max_inflight=6, refill_at=3)
    settler = Settler(ledger, using="default", batch=6)  # its thread is not started: nothing settles
    try:
        holds = keeper.hold_many([_item(n) for n in range(12)], lease=300, started=False)
        ledger.claimed(holds[:6])
        assert ledger.free() == 0  # six claimed, none returned: the lane is full
        for hold in holds[:4]:
            ctx = Context(hold.item, hold, "w", "default")
            assert ledger.start(hold, ctx)
            assert settler.ending(hold, ctx, None) == "succeeded"  # returned: queued for the settler
        assert wake.wait(0)  # the claim loop, which found no room, is woken
        assert ledger.running() == []  # returned: no longer running (shutdown would release them)
        assert ledger.inflight == 6 and set(holds[:4]) <= set(keeper.holds())  # held until settled
        assert ledger.free() == 4  # two still with the runners: room for four more
        ledger.claimed(holds[6:10])
        assert ledger.free() == 0
        for hold in holds[4:10]:
            ctx = Context(hold.item, hold, "w", "default")
            assert ledger.start(hold, ctx)
            settler.ending(hold, ctx, None)
        # Ten wait for the settler and none runs: room only up to twice max_inflight held.
        assert ledger.free() == 2
        ledger.claimed(holds[10:])
        assert ledger.free() == 0
        ledger.finished_many(holds[:10], set())  # the settler's batch
        assert (ledger.inflight, ledger.processed) == (2, 10)
        assert ledger.free() == 4
    finally:
        keeper.close()


def test_a_pool_claims_again_once_no_more_than_its_refill_point_is_busy():
    """The refill point is inclusive: with refill_at busy, the pool has room; one more, none."""
    keeper = LeaseKeeper(tick=60)
    ledger = Ledger(keeper, Signal(), max_inflight=6, refill_at=3, max_on_loop=4, loop_refill_at=2)
    try:
        holds = keeper.hold_many([_item(n) for n in range(7)], lease=300, started=False)
        ledger.claimed(holds[:4])
        assert ledger.free() == 0  # 4 busy, above the refill point
        ledger.finished(holds[0], ok=True)
        assert ledger.free() == 3  # exactly the refill point busy: claim the rest
        ledger.claimed(holds[4:7], ledger.loop)
        assert ledger.free(ledger.loop) == 0  # 3 on the loop, above its refill point of 2
        ledger.finished(holds[4], ok=True)
        assert ledger.free(ledger.loop) == 2
    finally:
        keeper.close()
