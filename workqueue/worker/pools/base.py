"""What every runner pool shares: the ``RunnerPool`` interface and the steps around a handler call.

A pool takes claimed items (their ``Hold``s) from the claim loop with ``submit`` and runs
each through the same three steps, whatever it runs them on:

1. ``Runs.begin(hold)``: not while draining (the item goes back), not if its lease went while
   it waited; otherwise a ``Context``, the item marked running, the stall clock started.
2. call the handler with ``(item, ctx)``, catching whatever it raises;
3. ``Runs.end(hold, ctx, exc)``: the settler decides and records what that ending means.

``ThreadRunnerPool`` runs ``concurrency`` threads, each with its own connection.
``workqueue.worker.pools.eventloop.AsyncRunnerPool`` awaits ``async def`` handlers on an event loop and calls the
same ``begin`` / ``end`` (off the loop whenever they may write). A sync handler that returns an
awaitable (an ``async def`` operation kind or task) hands its run on to the loop
(``Runs.to_loop``) and frees its thread. ``take_waiting`` hands back what was submitted but not
begun (shutdown releases it); ``stop`` ends the pool.
"""

from __future__ import annotations

import asyncio
import logging
import queue as stdqueue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from django.db import connections

from workqueue import handlers as registry
from workqueue.handlers import Handler
from workqueue.worker import metrics
from workqueue.worker.context import Context
from workqueue.worker.lease import Hold, LeaseKeeper
from workqueue.worker.limits import SoftTimeout, Watchdog

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
from workqueue.worker.ledger import Ledger
from workqueue.worker.settler import Settler

log = logging.getLogger("workqueue.worker")


class RunnerPool(Protocol):
    def start(self) -> None:
        """Start running submitted items."""

    def submit(self, holds: list[Hold]) -> None:
        """Run these claimed items (in this order, as capacity allows); never blocks."""

    def take_waiting(self) -> list[Hold]:
        """Take back the submitted items no runner has begun."""

    def stop(self, timeout: float) -> None:
        """Let running handlers end (waiting up to ``timeout`` for each runner), then stop."""

    @property
    def abandoned(self) -> int:
        """Runners left to a run its timeout gave up, still running its handler."""


class HoldQueue:
    """The queue of submitted holds a pool's runners take from, in claim order (the thread
    pool's and the process pool's): ``submit`` never blocks; ``take_waiting`` hands back what
    no runner has begun; a ``None`` tells one runner to leave."""

    def __init__(self):
        self.queue: stdqueue.SimpleQueue[Hold | None] = stdqueue.SimpleQueue()

    def submit(self, holds: list[Hold]) -> None:
        put = self.queue.put
        for hold in holds:
            put(hold)

    def take_waiting(self) -> list[Hold]:
        waiting: list[Hold] = []
        while True:
            try:
                hold = self.queue.get_nowait()
            except stdqueue.Empty:
                return waiting
            if hold is not None:
                waiting.append(hold)


class Runs:
    """The steps around a handler call that every runner pool shares."""

    def __init__(
        self,
        ledger: Ledger,
        settler: Settler,
        keeper: LeaseKeeper,
        *,
        draining: threading.Event,
        worker_id: str,
        using: str,
    ):
        self.ledger = ledger
        self.settler = settler
        self.keeper = keeper
        self.draining = draining
        self.worker_id = worker_id
        self.using = using
        #: Returns the worker's event-loop pool (started on first use); set by the Worker.
        self.loop: Callable[[], Any] | None = None
        #: Enforces the runs' time limits (workqueue.worker.limits).
        self.watchdog = Watchdog(using=using)
        self._started: dict[Hold, float] = {}  # each running hold's perf_counter() at its start (metrics)

    def begin(
        self,
        hold: Hold,
        connection: BaseDatabaseWrapper | None = None,
        *,
        on_abandon: Callable[[], None] | None = None,
    ) -> tuple[Handler, Context] | None:
        """Get ``hold``'s item ready to run; None if it must not run (already accounted for).

        ``connection``: this runner's database wrapper, when the pool knows it (a runner thread
        keeps the same one for its life), which spares a lookup through Django's per-thread
        connection handler for every item. ``on_abandon``: what the pool does when the run
        passes its timeout and is given up (a thread pool replaces the thread still in it).
        """
        item = hold.item
        _drop_if_broken(connection if connection is not None else connections[self.using])
        handler = registry.get(item.queue)
        if self.draining.is_set():
            self.settler.give_back([hold])  # shutting down: do not start it
            return None
        if handler is None:  # unregistered since the claim (the worker checks its queues at start)
            log.error("%r: no handler registered for queue %s; not running it", item, item.queue)
            self.ledger.finished(hold, ok=False)
            return None
        ctx = Context(item, hold, self.worker_id, self.using)
        if not self.ledger.start(hold, ctx):
            log.warning("%r: its lease went while it waited to start (%s); not running it", item, hold.reason)
            self.ledger.finished(hold, ok=False)
            return None
        hold.progress()  # starts the stall clock: the budget counts from the start, not the claim
        if metrics.record_runs:
            self._started[hold] = time.perf_counter()
        ctx._limits = (self, on_abandon)  # where ctx.time_limits() goes
        if handler.limits is not None:
            self.limit(hold, ctx, on_abandon, soft_timeout=handler.limits.soft_timeout, timeout=handler.limits.timeout)
        if handler.renews_lease:
            # The handler keeps its own lease from here on (operations' progress flushes).
            self.keeper.drop(hold)
        return handler, ctx

    def limit(self, hold: Hold, ctx: Context, on_abandon, *, soft_timeout=None, timeout=None, **_ignored) -> None:
        """Watch ``hold``'s run against these limits (``ctx.time_limits`` comes here)."""
        self.watchdog.watch(
            hold,
            ctx,
            soft_timeout=soft_timeout,
            timeout=timeout,
            on_timeout=lambda hold, exc: self.give_up(hold, exc, on_abandon=on_abandon),
        )

    def give_up(self, hold: Hold, exc: BaseException, *, died: bool = False, on_abandon=None) -> None:
        """A run passed its timeout (the watchdog's thread), or the process running it died:
        give its item up, as the attempts say, and account for it now; the run's own end,
        whenever it comes, is ignored."""
        from workqueue.exceptions import LeaseLost
        from workqueue.models import WorkItem

        item = hold.item
        log.warning("%r: %s", item, exc)
        self.keeper.drop(hold)
        if died and self.watchdog.active:
            self.watchdog.unwatch(hold)
        try:
            verdict = WorkItem.objects.db_manager(self.using).give_up(item, str(exc), died=died)
        except LeaseLost:
            verdict = "lost"
        except Exception:
            log.exception("%r: could not give up the timed-out run; its lease will lapse", item)
            verdict = "lost"
            drop_if_broken(self.using)
        if not died:
            metrics.timed_out(item.queue)
        self._started.pop(hold, None)
        self.ledger.stopped(hold)
        self.ledger.finished(hold, ok=False)
        log.info("%r: given up (%s)", item, verdict)
        if on_abandon is not None:
            on_abandon()

    def end(self, hold: Hold, ctx: Context, exc: BaseException | None) -> str:
        """Record how the run ended; return the outcome its span records."""
        if self.watchdog.active and not self.watchdog.unwatch(hold):
            # Its timeout ended it already (the item is given up): this late end settles nothing.
            log.warning("%r: its run ended after its timeout had given it up; not settled", hold.item)
            return "timeout"
        if isinstance(exc, asyncio.CancelledError) and hold.is_cancelled():
            # A coroutine cancelled because its hold was (lease lost, stall, stop, shutdown)
            # stopped, like a sync handler that returns after it was cancelled; one whose soft
            # timeout's cancel it did not catch failed its attempt (a return would complete it).
            exc = SoftTimeout() if hold.hurried else None
        outcome = self.settler.ending(hold, ctx, exc)
        if metrics.record_runs:
            metrics.run_ended(hold.item.queue, outcome, self._started.pop(hold, None))
        return outcome

    def to_loop(self, hold: Hold, ctx: Context, awaitable, traced) -> None:
        """Await ``awaitable`` (what a sync handler returned) on the event loop as the rest of the run."""
        assert self.loop is not None, "the Worker gives its Runs an event-loop pool"
        self.ledger.to_loop(hold)
        self.loop().resume(hold, ctx, awaitable, traced)

    def crashed(self, hold: Hold) -> None:
        """A runner's own error around ``hold``: never leave the item counted in flight."""
        log.exception("%r: runner error; its lease will lapse and it will be retried", hold.item)
        if self.watchdog.active:
            self.watchdog.unwatch(hold)
        self._started.pop(hold, None)
        self.ledger.finished(hold, ok=False)


def drop_if_broken(using: str) -> None:
    """Close this thread's connection if an error left it unusable.

    Deliberately not close_old_connections(): a worker keeps its connections (and their
    prepared statements) for its whole life, whatever CONN_MAX_AGE says for requests.
    """
    _drop_if_broken(connections[using])


def _drop_if_broken(conn: BaseDatabaseWrapper) -> None:
    if conn.connection is not None and conn.errors_occurred:
        if conn.is_usable():
            conn.errors_occurred = False
        else:
            conn.close()
