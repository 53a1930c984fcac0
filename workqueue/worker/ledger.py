"""What a worker holds and what it has done, behind one lock.

Every claimed item is tracked by its ``Hold`` (one per claim), never by the item id: the same
worker can claim an item again while an old run of it still goes on (its lease lapsed, or an
operator requeued it). A hold enters at the claim (``claimed``), is running while a handler
has it (``start`` .. ``stopped``) and leaves once (``finished`` or ``given_back``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from workqueue.lease import Hold, LeaseKeeper
from workqueue.listener import Signal
from workqueue.worker.context import Context


class Ledger:
    def __init__(self, keeper: LeaseKeeper, wake: Signal, *, max_inflight: int, refill_at: int):
        self.keeper = keeper
        self.wake = wake  # set when capacity frees up: the claim loop claims again
        self.max_inflight = max_inflight
        self.refill_at = refill_at
        self._lock = threading.Lock()
        self._holds: set[Hold] = set()  # claimed and not yet accounted for
        self._running: dict[Hold, Context] = {}
        self.inflight = 0
        self.processed = 0
        self.succeeded = 0
        self.failed = 0
        self.lost = 0

    def free(self) -> int:
        """How many items the claim loop may claim now (0 until half a batch has started)."""
        with self._lock:
            if self.inflight > self.refill_at:
                return 0
            return self.max_inflight - self.inflight

    def claimed(self, holds: list[Hold]) -> None:
        with self._lock:
            self.inflight += len(holds)
            self._holds.update(holds)

    def start(self, hold: Hold, context: Callable[[], Context]) -> Context | None:
        """Mark ``hold`` running with a new context, unless it was cancelled while it waited."""
        with self._lock:
            if hold.is_cancelled():
                return None  # lost (or given up) while it waited: someone else may have it now
            ctx = self._running[hold] = context()
            return ctx

    def stopped(self, hold: Hold) -> None:
        with self._lock:
            self._running.pop(hold, None)

    def running(self) -> list[Hold]:
        with self._lock:
            return list(self._running)

    def count_lost(self, n: int = 1) -> None:
        with self._lock:
            self.lost += n

    def finished(self, hold: Hold, *, ok: bool) -> None:
        """Account for a claim this worker is done with (once: a second call does nothing)."""
        with self._lock:
            if hold not in self._holds:
                return
            self._holds.discard(hold)
            self.inflight -= 1
            self.processed += 1
            if ok:
                self.succeeded += 1
            else:
                self.failed += 1
            refill = self.inflight <= self.refill_at
        self.keeper.drop(hold)
        if refill:
            self.wake.set()

    def finished_many(self, holds: list[Hold], lost: set[int]) -> None:
        """``finished`` for a settled batch: ok unless ``id(hold.item)`` is in ``lost``. One lock,
        one lease-keeper drop and at most one wake-up for the whole batch, not one per item."""
        with self._lock:
            mine = [hold for hold in holds if hold in self._holds]
            self._holds.difference_update(mine)
            failed = sum(1 for hold in mine if id(hold.item) in lost) if lost else 0
            self.inflight -= len(mine)
            self.processed += len(mine)
            self.succeeded += len(mine) - failed
            self.failed += failed
            refill = self.inflight <= self.refill_at
        self.keeper.drop_many(mine)
        if refill and mine:
            self.wake.set()

    def given_back(self, hold: Hold) -> None:
        """Forget a claim released without running (not counted as processed)."""
        with self._lock:
            if hold in self._holds:
                self._holds.discard(hold)
                self.inflight -= 1
        self.keeper.drop(hold)
