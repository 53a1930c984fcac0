"""The claim loop: the worker's main thread.

Each pass: a heartbeat and maintenance when due, then, per lane (the runner threads' queues,
and the event loop's ``async def`` queues), claim up to that lane's free capacity in one short
transaction and hand the items to its runner pool. A pass that filled its batch goes
straight round; otherwise wait for "notified, or capacity freed, or poll interval, or stop".
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

from django.db import connections

from workqueue import controls, sql
from workqueue.conf import wq_settings
from workqueue.items import Item
from workqueue.lease import Hold, LeaseKeeper
from workqueue.listener import Signal
from workqueue.worker.ledger import Ledger
from workqueue.worker.outcome import DB_ERRORS
from workqueue.worker.runners import RunnerPool, drop_if_broken

log = logging.getLogger("workqueue.worker")


class ClaimLoop:
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
    ):
        self.queues = queues  # every queue served (the heartbeat lists them)
        # (queues, pool, on_loop): the threads' lane, then the event loop's.
        on_loop = set(loop_queues or [])
        self.lanes: list[tuple[list[str], Callable[[], RunnerPool], bool]] = []
        if [q for q in queues if q not in on_loop]:
            self.lanes.append(([q for q in queues if q not in on_loop], lambda: pool, False))
        if on_loop and loop_pool is not None:
            self.lanes.append(([q for q in queues if q in on_loop], loop_pool, True))
        self.worker_id = worker_id
        self.using = using
        self.poll = poll
        self.max_items = max_items
        self.max_seconds = max_seconds
        self.maintenance_every = maintenance  # seconds between recover+reap runs (None = off)
        self.ledger = ledger
        self.keeper = keeper
        self.pool = pool
        self.wake = wake
        self.stopping = stopping
        self.claims = 0
        self._flow_retry: float | None = None
        self._started = time.monotonic()
        self._last_beat = 0.0
        self._last_maintenance = 0.0

    def run(self) -> None:
        ledger = self.ledger
        backoff = 0.05
        deadline = self._started + self.max_seconds if self.max_seconds else None
        while not self.stopping.is_set():
            if deadline is not None and time.monotonic() >= deadline:
                log.info("--max-seconds reached")
                break
            if self.max_items is not None and ledger.processed + ledger.inflight >= self.max_items:
                if ledger.inflight == 0:
                    log.info("--max-items reached")
                    break
                self.wake.wait(0.05)
                continue
            try:
                drop_if_broken(self.using)
                self.beat()
                self._maintenance()
                claimed, asked = self.claim_pass()
                backoff = 0.05
            except DB_ERRORS as exc:
                log.warning("database unavailable (%s: %s); retrying in %.2fs", exc.__class__.__name__, exc, backoff)
                self._reset_connection()
                self.stopping.wait(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            except Exception:
                # A bug (a hook's, a statement's) must not end the worker, or its supervisor
                # restarts it into the same error: log it, back off, and go on.
                log.exception("claim pass failed; retrying in %.2fs", backoff)
                self._reset_connection()
                self.stopping.wait(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            if asked and claimed >= asked:
                continue  # a full batch: there is probably more, go straight round
            timeout = self.poll
            if self._flow_retry is not None:
                if self._flow_retry <= 0:
                    continue  # a flow claim took some: look again before sleeping
                timeout = min(timeout, self._flow_retry)  # a limit frees a start then
            if deadline is not None:
                timeout = max(0.0, min(timeout, deadline - time.monotonic()))
            self.wake.wait(timeout)

    def claim_pass(self) -> tuple[int, int]:
        """Claim up to each lane's free capacity; return (claimed, asked) over the lanes."""
        self._flow_retry = None
        claimed = asked = 0
        for queues, pool, on_loop in self.lanes:
            got, want = self._claim_lane(queues, pool, on_loop)
            claimed, asked = claimed + got, asked + want
        return claimed, asked

    def _claim_lane(self, queues: list[str], pool: Callable[[], RunnerPool], on_loop: bool) -> tuple[int, int]:
        free = self.ledger.free(on_loop=on_loop)
        if free and self.max_items is not None:
            free = min(free, self.max_items - self.ledger.processed - self.ledger.inflight)
        if free <= 0:
            return 0, 0
        from workqueue.models import WorkItem

        result = WorkItem.objects.db_manager(self.using).claim(
            queues, limit=free, worker_id=self.worker_id, relaxed=True
        )
        self.claims += 1
        if result.flow and len(result.items) < free:
            # Short on the flow path: a limit may be holding due work back. Look again at
            # once if this claim took some, else when the limit frees a start.
            wait = (
                0.0 if result.items else controls.flow_wait([wq_settings().queue(q) for q in queues], using=self.using)
            )
            if wait is not None:  # the soonest any lane's limit frees a start
                self._flow_retry = wait if self._flow_retry is None else min(self._flow_retry, wait)
        for item in result.settled:
            log.warning("%r spent its %d attempts on lapsed leases; failed", item, item.max_attempts)
        if result.items:
            holds = self._hold(result.items)
            self.ledger.claimed(holds, on_loop=on_loop)
            pool().submit(holds)
        return len(result.items), free

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

    def _reset_connection(self) -> None:
        try:
            connections[self.using].close()
        except Exception:
            pass

    def beat(self, state: str = "running", force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_beat < wq_settings().worker_heartbeat:
            return
        from psycopg.types.json import Jsonb

        sql.run(
            "worker_beat",
            {
                "id": self.worker_id,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "queues": Jsonb(self.queues),
                "state": state,
                "processed": self.ledger.processed,
                "failed": self.ledger.failed,
            },
            using=self.using,
        )
        self._last_beat = now

    def _maintenance(self) -> None:
        every = self.maintenance_every
        if not every or time.monotonic() - self._last_maintenance < every:
            return
        self._last_maintenance = time.monotonic()
        from workqueue import maintenance

        for name in ("recover", "reap"):
            try:
                maintenance.run_sweep(name, using=self.using)
            except DB_ERRORS:
                raise
            except Exception:
                log.exception("%s failed", name)
