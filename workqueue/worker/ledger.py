"""What a worker holds and what it has done, behind one lock.

Every claimed item is tracked by its ``Hold`` (one per claim), never by the item id: the same
worker can claim an item again while an old run of it still goes on (its lease lapsed, or an
operator requeued it). A hold enters at the claim (``claimed``), is running while a handler
has it (``start`` .. ``stopped``) and leaves once (``finished`` or ``given_back``).

Two lanes share the ledger: the runner threads and the event loop (``async def`` handlers,
``workqueue.worker.pools.eventloop``). Each has its own capacity, so a full loop never stops the threads from
claiming and the other way round; ``to_loop`` moves a run whose sync handler handed its work
on as a coroutine (an async operation or task) from the threads' lane to the loop's.
"""

from __future__ import annotations

import threading

from workqueue.listener import Signal
from workqueue.worker.context import Context
from workqueue.worker.lease import Hold, LeaseKeeper


class Ledger:
    def __init__(
        self,
        keeper: LeaseKeeper,
        wake: Signal,
        *,
        max_inflight: int,
        refill_at: int,
        max_on_loop: int = 0,
        loop_refill_at: int = 0,
    ):
        self.keeper = keeper
        self.wake = wake  # set when capacity frees up: the claim loop claims again
        self.max_inflight = max_inflight  # the threads' lane
        self.refill_at = refill_at
        self.max_on_loop = max_on_loop  # the event loop's lane
        self.loop_refill_at = loop_refill_at
        self._lock = threading.Lock()
        self._holds: set[Hold] = set()  # claimed and not yet accounted for
        self._running: dict[Hold, Context] = {}
        self.inflight = 0  # every claim not yet accounted for, both lanes
        self.on_loop = 0  # of which the event loop's
        self._loop_holds: set[Hold] = set()
        # Per lane (threads, event loop): whether the claim loop's last look found no room. Only
        # then does freed capacity wake it; a loop that found room and claimed what there was
        # waits for a NOTIFY or its poll (a finished item brings no new work with it).
        self._starved = [False, False]
        # The threads' lane: claims whose handler returned and which wait for the settler's next
        # batch. They need no runner any more, so the claim loop may claim in their place and
        # the next claim overlaps the settle instead of waiting for it; at most max_inflight of
        # them on top of the lane's own (see free()).
        self._returned: set[Hold] = set()
        self.processed = 0
        self.succeeded = 0
        self.failed = 0
        self.lost = 0

    def free(self, *, on_loop: bool = False) -> int:
        """How many items the claim loop may claim now for a lane (0 until half a batch has started).

        On the threads' lane an item whose handler returned no longer counts against the room
        while it waits for the settler, as long as no more than twice max_inflight are held."""
        with self._lock:
            room = self._room(on_loop)
            self._starved[on_loop] = room <= 0
            return room

    def _room(self, on_loop: bool) -> int:
        """A lane's room for a claim (under the lock): what free() answers."""
        if on_loop:
            return self.max_on_loop - self.on_loop if self.on_loop <= self.loop_refill_at else 0
        threads = self.inflight - self.on_loop
        busy = threads - len(self._returned)  # claimed, not yet returned
        return 0 if busy > self.refill_at else min(self.max_inflight - busy, 2 * self.max_inflight - threads)

    def _refill(self, on_loop: bool) -> bool:
        """Whether the claim loop, which found no room in this lane at its last look, should look
        again now (under the lock)."""
        return self._starved[on_loop] and self._room(on_loop) > 0

    def claimed(self, holds: list[Hold], *, on_loop: bool = False) -> None:
        with self._lock:
            self.inflight += len(holds)
            self._holds.update(holds)
            if on_loop:
                self.on_loop += len(holds)
                self._loop_holds.update(holds)

    def to_loop(self, hold: Hold) -> None:
        """A thread's run goes on as a coroutine on the event loop: its slot moves lanes."""
        with self._lock:
            if hold not in self._holds or hold in self._loop_holds:
                return
            self._loop_holds.add(hold)
            self.on_loop += 1
            refill = self._refill(False)
        if refill:
            self.wake.set()

    def returned(self, hold: Hold) -> None:
        """``hold``'s handler returned and its item waits for the settler's next batch: it is no
        longer running, and on the threads' lane it no longer takes a runner's place (free())."""
        with self._lock:
            self._running.pop(hold, None)
            if hold not in self._holds or hold in self._loop_holds:
                return
            self._returned.add(hold)
            refill = self._refill(False)
        if refill:
            self.wake.set()

    def _leave(self, hold: Hold) -> bool:
        """Drop ``hold`` from its lane (under the lock); return the lane (on_loop)."""
        self._holds.discard(hold)
        self.inflight -= 1
        if hold in self._loop_holds:
            self._loop_holds.discard(hold)
            self.on_loop -= 1
            return True
        self._returned.discard(hold)
        return False

    def start(self, hold: Hold, context: Context) -> bool:
        """Mark ``hold`` running under ``context``, unless it was cancelled while it waited."""
        with self._lock:
            if hold.is_cancelled():
                return False  # lost (or given up) while it waited: someone else may have it now
            self._running[hold] = context
            return True

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
            refill = self._refill(self._leave(hold))
            self.processed += 1
            if ok:
                self.succeeded += 1
            else:
                self.failed += 1
        self.keeper.drop(hold)
        if refill:
            self.wake.set()

    def finished_many(self, holds: list[Hold], lost: set[int]) -> None:
        """``finished`` for a settled batch: ok unless ``id(hold.item)`` is in ``lost``. One lock,
        one lease-keeper drop and at most one wake-up for the whole batch, not one per item."""
        with self._lock:
            mine = [hold for hold in holds if hold in self._holds]
            lanes = {self._leave(hold) for hold in mine}  # each slot back to its own lane
            refill = any(self._refill(on_loop) for on_loop in lanes)
            failed = sum(1 for hold in mine if id(hold.item) in lost) if lost else 0
            self.processed += len(mine)
            self.succeeded += len(mine) - failed
            self.failed += failed
        self.keeper.drop_many(mine)
        if refill:
            self.wake.set()

    def given_back(self, hold: Hold) -> None:
        """Forget a claim released without running (not counted as processed)."""
        with self._lock:
            if hold in self._holds:
                self._leave(hold)
        self.keeper.drop(hold)
