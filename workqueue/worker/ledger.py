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
from dataclasses import dataclass, field

from workqueue.worker.context import Context
from workqueue.worker.lease import Hold, LeaseKeeper
from workqueue.worker.loop import Signal


@dataclass(eq=False)
class Pool:
    """One pool's capacity: its holds, how many it may hold, and when to claim again.

    The claim loop claims for a pool only once no more than ``refill_at`` of its holds are
    busy, and then up to ``capacity`` (``room()``). On the threads' pool (``overlap``) an item
    whose handler returned no longer counts as busy while it waits for the settler, so the next
    claim overlaps the settle instead of waiting for it; at most ``capacity`` of those on top of
    the pool's own. Read and changed only under the ledger's lock."""

    name: str
    capacity: int
    refill_at: int
    overlap: bool = False
    holds: set[Hold] = field(default_factory=set)
    returned: set[Hold] = field(default_factory=set)  # handlers returned, waiting for the settler
    # Whether the claim loop's last look found no room: only then does freed room wake it (a
    # loop that found room and claimed what there was waits for a NOTIFY or its poll).
    starved: bool = False

    def room(self) -> int:
        """How many items a claim may take for this pool now (0 until enough have started)."""
        busy = len(self.holds) - len(self.returned)
        if busy > self.refill_at:
            return 0
        if not self.overlap:
            return self.capacity - busy
        return min(self.capacity - busy, 2 * self.capacity - len(self.holds))

    def refill(self) -> bool:
        """Whether the claim loop, which found no room at its last look, should look again now."""
        return self.starved and self.room() > 0


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
        self.threads = Pool("threads", max_inflight, refill_at, overlap=True)
        self.loop = Pool("loop", max_on_loop, loop_refill_at)
        self._lock = threading.Lock()
        self._pool_of: dict[Hold, Pool] = {}  # claimed and not yet accounted for, by its pool
        self._running: dict[Hold, Context] = {}
        self.processed = 0
        self.succeeded = 0
        self.failed = 0
        self.lost = 0

    @property
    def inflight(self) -> int:
        """Every claim not yet accounted for, both pools."""
        return len(self._pool_of)

    @property
    def on_loop(self) -> int:
        """Of which the event loop's."""
        return len(self.loop.holds)

    def free(self, pool: Pool | None = None) -> int:
        """How many items the claim loop may claim now for ``pool`` (the threads' by default)."""
        pool = self.threads if pool is None else pool
        with self._lock:
            room = pool.room()
            pool.starved = room <= 0
            return room

    def claimed(self, holds: list[Hold], pool: Pool | None = None) -> None:
        pool = self.threads if pool is None else pool
        with self._lock:
            pool.holds.update(holds)
            for hold in holds:
                self._pool_of[hold] = pool

    def to_loop(self, hold: Hold) -> None:
        """A thread's run goes on as a coroutine on the event loop: its slot moves pools."""
        with self._lock:
            if self._pool_of.get(hold) is not self.threads:
                return
            self.threads.holds.discard(hold)
            self.loop.holds.add(hold)
            self._pool_of[hold] = self.loop
            refill = self.threads.refill()
        if refill:
            self.wake.set()

    def returned(self, hold: Hold) -> None:
        """``hold``'s handler returned and its item waits for the settler's next batch: it is no
        longer running, and on the threads' pool it no longer takes a runner's place (free())."""
        with self._lock:
            self._running.pop(hold, None)
            pool = self._pool_of.get(hold)
            if pool is None or not pool.overlap:
                return
            pool.returned.add(hold)
            refill = pool.refill()
        if refill:
            self.wake.set()

    def _leave(self, hold: Hold) -> Pool | None:
        """Drop ``hold`` from its pool (under the lock); return the pool."""
        pool = self._pool_of.pop(hold, None)
        if pool is not None:
            pool.holds.discard(hold)
            pool.returned.discard(hold)
        return pool

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
            pool = self._leave(hold)
            if pool is None:
                return
            refill = pool.refill()
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
            mine = [hold for hold in holds if hold in self._pool_of]
            pools = {self._leave(hold) for hold in mine}  # each slot back to its own pool
            refill = any(pool.refill() for pool in pools if pool is not None)
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
            self._leave(hold)
        self.keeper.drop(hold)
