"""The claim loop: the worker's main thread.

Each pass: a heartbeat and maintenance when due, then, per pool (the runner threads' queues,
and the event loop's ``async def`` queues), claim up to that pool's free capacity in one short
transaction and hand the items to it. Each pool decides for itself: one whose claim came back
full goes straight round; one whose claim came back short is not claimed for again until a
NOTIFY names one of its queues, a flow limit frees a start, or its poll interval has passed, so
an idle pool neither holds back a busy one nor costs it a statement per pass. When no pool has
more to claim, wait for "notified, or capacity freed, or the soonest pool's poll, or stop".
A database outage (or a bug in a hook or a statement) is logged and ridden out with backoff:
a worker that exits on it would be restarted by its supervisor into the same error.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from workqueue import controls, store
from workqueue.conf import wq_settings
from workqueue.items import Item
from workqueue.worker import metrics
from workqueue.worker.lease import Hold, LeaseKeeper
from workqueue.worker.ledger import Ledger, Pool
from workqueue.worker.loop import DB_ERRORS, BackgroundLoop, Signal
from workqueue.worker.pools.base import RunnerPool, drop_if_broken

log = logging.getLogger("workqueue.worker")


@dataclass(eq=False)
class Lane:
    """One pool's share of the claim loop: its queues, the pool it feeds, and when to claim next."""

    queues: list[str]
    runners: Callable[[], RunnerPool]  # what runs its items
    capacity: Pool  # its room and holds, in the ledger (ledger.threads or ledger.loop)
    due: float = 0.0  # time.monotonic() from which the next pass claims for it (0: at once)
    full: bool = False  # its last claim took all it asked for: there is probably more

    def notified(self) -> None:
        self.due = 0.0


class ClaimLoop(BackgroundLoop):
    name = "workqueue-claim-loop"
    first_backoff = 0.05
    log = log

    def __init__(
        self,
        *,
        queues: list[str],
        worker_id: str,
        using: str,
        poll: float,
        max_items: int | None,
        max_seconds: float | None,
        maintenance: float | None,
        ledger: Ledger,
        keeper: LeaseKeeper,
        pool: RunnerPool,
        wake: Signal,
        stopping: threading.Event,
        loop_queues: list[str] | None = None,
        loop_pool: Callable[[], RunnerPool] | None = None,
        before_pass: Callable[[], None] | None = None,
    ):
        self.queues = queues  # every queue served (the heartbeat lists them)
        self.before_pass = before_pass  # run at the start of each pass (finds a family's new queues)
        self._loop_pool = loop_pool
        # The threads' lane, then the event loop's.
        on_loop = set(loop_queues or [])
        self.lanes: list[Lane] = []
        if [q for q in queues if q not in on_loop]:
            self.lanes.append(Lane([q for q in queues if q not in on_loop], lambda: pool, ledger.threads))
        if on_loop and loop_pool is not None:
            self.lanes.append(Lane([q for q in queues if q in on_loop], loop_pool, ledger.loop))
        self._lane_of = {queue: lane for lane in self.lanes for queue in lane.queues}
        self.worker_id = worker_id
        super().__init__(using=using, stopping=stopping, wake=wake)
        self.poll = poll
        self.max_items = max_items
        self.max_seconds = max_seconds
        self.maintenance_every = maintenance  # seconds between recover+reap runs (None = off)
        #: What the heartbeat says of the worker's pools (set by the Worker).
        self.describe_pool: Callable[[], dict] | None = None
        self.ledger = ledger
        self.keeper = keeper
        self.pool = pool
        self.claims = 0
        self._started = time.monotonic()
        self._last_beat = 0.0
        self._last_maintenance = 0.0
        self._deadline = self._started + max_seconds if max_seconds else None

    def step(self) -> float | None:
        """One pass (a heartbeat and maintenance when due, then each due pool's claim); the
        wait before the next (0: a pool has more to claim now; None: a --max-* limit ended it)."""
        ledger = self.ledger
        if self._deadline is not None and time.monotonic() >= self._deadline:
            log.info("--max-seconds reached")
            return None
        if self.max_items is not None and ledger.processed + ledger.inflight >= self.max_items:
            if ledger.inflight == 0:
                log.info("--max-items reached")
                return None
            return 0.05
        drop_if_broken(self.using)
        self.beat()
        self._maintenance()
        if self.before_pass is not None:
            self.before_pass()
        self.claim_pass()
        timeout = self.idle_for()
        if timeout > 0 and self._deadline is not None:
            timeout = max(0.0, min(timeout, self._deadline - time.monotonic()))
        return timeout

    def failed(self, exc: BaseException) -> None:
        self.close_connection()
        self.notified(None)  # what the failed pass did not claim is due once it is back

    def finished(self) -> None:
        pass  # the main thread's connection: the process releases what it holds with it

    def notified(self, queue: str | None) -> None:
        """A NOTIFY named ``queue`` (None: any, e.g. after the listener reconnected): the pools
        that serve it claim at their next pass."""
        if queue is None:
            for lane in self.lanes:
                lane.notified()
        elif (named := self._lane_of.get(queue)) is not None:
            named.notified()

    def serve(self, queue: str, *, on_loop: bool) -> None:
        """Claim for ``queue`` too from now on (a queue family's, found while running), in the
        event loop's lane or the threads', made if the worker had none yet."""
        capacity = self.ledger.loop if on_loop else self.ledger.threads
        lane = next((lane for lane in self.lanes if lane.capacity is capacity), None)
        if lane is None:
            loop_pool = self._loop_pool
            runners: Callable[[], RunnerPool] = loop_pool if on_loop and loop_pool is not None else lambda: self.pool
            lane = Lane([], runners, capacity)
            self.lanes.append(lane)
        lane.queues.append(queue)
        self._lane_of[queue] = lane
        self.queues.append(queue)
        lane.notified()

    def idle_for(self) -> float:
        """How long the loop may wait before its next pass (0: go straight round). A pool whose
        claim came back full, or that is due, wants a pass now; a pool with no room is woken by
        the ledger when room frees; a pool whose claim came back short waits for its due time."""
        now = time.monotonic()
        waits = [self.poll]
        for lane in self.lanes:
            if lane.full or (lane.due and lane.due <= now):
                return 0.0
            if lane.due:
                waits.append(lane.due - now)
        return min(waits)

    def claim_pass(self) -> None:
        """Claim up to each due pool's free capacity, and note per pool when to claim again."""
        now = time.monotonic()
        for lane in self.lanes:
            if lane.due and lane.due > now:
                lane.full = False
                continue  # its last claim came back short: nothing new since for its queues
            self._claim_lane(lane)

    def _claim_lane(self, lane: Lane) -> None:
        lane.full = False
        free = self.ledger.free(lane.capacity)
        if free and self.max_items is not None:
            free = min(free, self.max_items - self.ledger.processed - self.ledger.inflight)
        if free <= 0:
            lane.due = 0.0  # no room: the ledger wakes the loop when room frees
            return
        from workqueue.models import WorkItem

        # Due again after the poll interval unless a NOTIFY for its queues comes first; set
        # before the claim, so that a NOTIFY arriving while it runs is not lost.
        lane.due = time.monotonic() + self.poll
        started = time.perf_counter()
        result = WorkItem.objects.db_manager(self.using).claim(
            lane.queues, limit=free, worker_id=self.worker_id, relaxed=True
        )
        self.claims += 1
        got = len(result.items)
        metrics.claimed(got, started)
        if got >= free:
            lane.full = True  # there is probably more: go straight round
            lane.due = 0.0
        elif result.flow:
            # Short on the flow path: a limit may be holding due work back. Look again at
            # once if this claim took some, else when the limit frees a start.
            wait = 0.0 if got else controls.flow_wait([wq_settings().queue(q) for q in lane.queues], using=self.using)
            if wait is not None:  # the soonest any of its queues' limits frees a start
                lane.due = min(lane.due, time.monotonic() + wait)
        for item in result.settled:
            log.warning("%r spent its %d attempts on lapsed leases; failed", item, item.max_attempts)
        if result.items:
            holds = self._hold(result.items)
            self.ledger.claimed(holds, lane.capacity)
            lane.runners().submit(holds)

    def _hold(self, items: list[Item]) -> list[Hold]:
        """Give the lease keeper the claimed items (each with its queue's lease), in claim order."""
        conf = wq_settings()
        first = items[0].queue
        if all(item.queue == first for item in items):  # the usual claim: one queue, no regrouping
            qconf = conf.queue(first)
            return self.keeper.hold_many(items, lease=qconf.lease, stall=qconf.stall, started=False)
        by_queue: dict[str, list[Item]] = {}
        for item in items:
            by_queue.setdefault(item.queue, []).append(item)
        hold_of: dict[int, Hold] = {}  # by id(item): this claim's Item objects
        for queue, queued in by_queue.items():
            qconf = conf.queue(queue)
            # The stall clock starts when a runner starts the handler, not now: an item may
            # wait for a runner longer than its stall budget.
            for hold in self.keeper.hold_many(queued, lease=qconf.lease, stall=qconf.stall, started=False):
                hold_of[id(hold.item)] = hold
        return [hold_of[id(item)] for item in items]

    def beat(self, state: str = "running", force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_beat < wq_settings().worker_heartbeat:
            return
        from psycopg.types.json import Jsonb

        store.worker_beat(
            id=self.worker_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            queues=Jsonb(self.queues),
            state=state,
            processed=self.ledger.processed,
            failed=self.ledger.failed,
            pool=Jsonb(self.describe_pool() if self.describe_pool is not None else {}),
            using=self.using,
        )
        self._last_beat = now

    def _maintenance(self) -> None:
        every = self.maintenance_every
        if not every or time.monotonic() - self._last_maintenance < every:
            return
        self._last_maintenance = time.monotonic()
        from workqueue import sweeps as maintenance

        for name in ("recover", "reap"):
            try:
                maintenance.run_sweep(name, using=self.using)
            except DB_ERRORS:
                raise
            except Exception:
                log.exception("%s failed", name)
