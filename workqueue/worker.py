"""The claim loop ``manage.py runworker`` hosts.

One process: a main loop that claims batches, ``concurrency`` threads that run handlers, a
settler thread that completes finished items in batches, a lease keeper that renews what
is held, and the process's shared LISTEN connection that wakes the loop.

The main loop's shape: claim in a short transaction; hand items to the runners; a pass that
filled its batch goes straight round; otherwise wait for "notified, or capacity freed, or
poll interval, or stop". The first SIGTERM/SIGINT stops claiming, lets running items finish
within the grace period, cancels and releases the rest back to queued and exits 0; a second
signal exits at once. A database outage is logged and ridden out with backoff.

Everything the worker tracks about a claimed item hangs off its ``Hold`` (one per claim):
the run queue carries holds, and the in-flight set and the running contexts are keyed by
the hold, never by the item id, because the same worker can claim an item again while an
old run of it still goes on (its lease lapsed, or an operator requeued it).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import queue as stdqueue
import re
import signal
import socket
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.utils import InterfaceError, OperationalError

from workqueue import handlers as registry
from workqueue import listener as listener_mod
from workqueue import sql, tracing
from workqueue.aio import AsyncPool
from workqueue.conf import wq_settings
from workqueue.exceptions import LeaseLost, Permanent, Retry
from workqueue.items import Item
from workqueue.lease import Hold, LeaseKeeper

log = logging.getLogger("workqueue.worker")

_DB_ERRORS = (OperationalError, InterfaceError)


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass
class WorkerOptions:
    queues: list[str] = field(default_factory=list)
    concurrency: int | None = None
    async_concurrency: int | None = None  # async def handlers at once on the event loop
    batch: int | None = None
    poll: float | None = None
    max_items: int | None = None
    max_seconds: float | None = None
    worker_id: str | None = None
    grace: float | None = None
    using: str = DEFAULT_DB_ALIAS
    install_signals: bool = True
    maintenance: float | None = None  # seconds between recover+reap runs (None = off)


class Context:
    """What a handler gets beside its item.

    - ``reclaimed``: the previous holder's lease lapsed (it died or stalled); surface recovery.
    - ``attempt`` / ``final``: this attempt's number, and whether a failure now is the last.
    - ``cancelled``: an Event set when the lease is lost, the holder stalled, the item was
      stopped (``cancel_key``, force stop) or the shutdown grace period ended. Check it
      between steps and stop early.
    - ``progress()``: report a real step of work (feeds the stall budget).
    - ``complete()`` / ``fail()`` / ``requeue()``: settle the item yourself, e.g. inside your
      own ``transaction.atomic()`` so the settlement commits with your writes. An ``async def``
      handler awaits ``acomplete()`` / ``afail()`` / ``arequeue()``, or calls the plain ones
      inside a function it runs with ``sync_to_async`` (its transaction and all).
    """

    __slots__ = ("_cancelled", "_hold", "_settling", "item", "settled", "using", "worker_id")

    def __init__(self, item: Item, hold: Hold | None, worker_id: str, using: str):
        self.item = item
        self._hold = hold
        self._cancelled = None if hold is not None else threading.Event()
        self._settling = False  # the handler wrote a settlement (it may still roll back)
        self.settled = False
        self.worker_id = worker_id
        self.using = using

    @property
    def cancelled(self) -> threading.Event:
        return self._hold.cancelled if self._hold is not None else self._cancelled

    def is_cancelled(self) -> bool:
        """Whether the handler was told to stop (a non-blocking check)."""
        if self._hold is not None:
            return self._hold.is_cancelled()
        return self._cancelled.is_set()

    @property
    def reclaimed(self) -> bool:
        return self.item.reclaimed

    @property
    def attempt(self) -> int:
        return self.item.attempts

    @property
    def final(self) -> bool:
        return self.item.final

    def progress(self) -> None:
        if self._hold is not None:
            self._hold.progress()

    def _mark_settled(self) -> None:
        conn = transaction.get_connection(self.using)
        if conn.in_atomic_block:
            transaction.on_commit(self._set_settled, using=self.using)
        else:
            self.settled = True

    def _set_settled(self) -> None:
        self.settled = True

    def _settle(self, write):
        # Tell the lease keeper first: once the settlement commits, a renewal finds the proof
        # gone, and that is this settlement, not a lost lease.
        if self._hold is not None:
            self._hold.settling = True
        try:
            result = write()
        except BaseException:
            if self._hold is not None and not self.settled:
                self._hold.settling = False
            raise
        self._settling = True
        self._mark_settled()
        return result

    def complete(self, outcome: str = "succeeded") -> None:
        """Settle the item now (raises LeaseLost if it is no longer yours)."""
        from workqueue.models import WorkItem

        self._settle(lambda: WorkItem.objects.db_manager(self.using).complete(self.item, outcome))

    def fail(self, error: str, *, permanent: bool = False, delay: float | None = None) -> str:
        from workqueue.models import WorkItem

        return self._settle(
            lambda: WorkItem.objects.db_manager(self.using).fail(self.item, error, permanent=permanent, delay=delay)
        )

    def requeue(self) -> None:
        from workqueue.models import WorkItem

        self._settle(lambda: WorkItem.objects.db_manager(self.using).requeue(self.item))

    async def acomplete(self, outcome: str = "succeeded") -> None:
        """``complete()`` for an async handler."""
        from asgiref.sync import sync_to_async

        await sync_to_async(self.complete)(outcome)

    async def afail(self, error: str, *, permanent: bool = False, delay: float | None = None) -> str:
        """``fail()`` for an async handler."""
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.fail)(error, permanent=permanent, delay=delay)

    async def arequeue(self) -> None:
        """``requeue()`` for an async handler."""
        from asgiref.sync import sync_to_async

        await sync_to_async(self.requeue)()


class Worker:
    """A claim loop over some queues; ``run()`` blocks until it is told to stop."""

    def __init__(self, options: WorkerOptions):
        conf = wq_settings()
        self.options = options
        self.using = options.using
        self.queues = sorted(options.queues or registry.queues())
        missing = [q for q in self.queues if registry.get(q) is None]
        if missing:
            raise ValueError(
                f"no handler registered for queue(s) {', '.join(missing)}; "
                f"registered: {', '.join(registry.queues()) or '(none)'}"
            )
        if not self.queues:
            raise ValueError("no queues to serve: register a handler with workqueue.handlers.register()")
        self.worker_id = options.worker_id or default_worker_id()
        self.concurrency = options.concurrency or conf.concurrency
        self.batch = options.batch or conf.batch
        self.poll = options.poll if options.poll is not None else conf.poll_interval
        self.grace = options.grace if options.grace is not None else conf.shutdown_grace
        # Keep up to one batch claimed ahead of the runners, and claim again once half of
        # it has started, so runners never sit idle while a claim is on the wire.
        self.max_inflight = max(self.batch, self.concurrency) + max(1, self.batch // 2)
        self.refill_at = self.max_inflight - max(1, self.batch // 2)
        # Queues whose handler is async def run on the event loop (workqueue.aio), up to
        # async_concurrency at once, claimed separately from the threads' queues.
        self.async_queues = [q for q in self.queues if registry.get(q).is_async]
        self.sync_queues = [q for q in self.queues if not registry.get(q).is_async]
        self.async_concurrency = options.async_concurrency or conf.async_concurrency
        self.async_refill_at = self.async_concurrency - max(1, min(self.batch, self.async_concurrency) // 2)
        self.async_inflight = 0
        self._async_holds: set[Hold] = set()  # the holds counted in async_inflight
        self._pool: AsyncPool | None = None
        self.keeper = LeaseKeeper(using=self.using)
        self.wake = listener_mod.Signal()
        self._runq: stdqueue.SimpleQueue = stdqueue.SimpleQueue()
        self._settle: list[Hold] = []
        self._settle_cv = threading.Condition()
        self._holds: set[Hold] = set()  # claimed and not yet accounted for (one per claim)
        self._running: dict[Hold, Context] = {}
        self._lock = threading.Lock()
        self.inflight = 0
        self.processed = 0
        self.succeeded = 0
        self.failed = 0
        self.lost = 0
        self.claims = 0
        self._stopping = threading.Event()
        self._draining = False
        self._threads: list[threading.Thread] = []
        self._listen_token: int | None = None
        self._signals = 0
        self._started = time.monotonic()
        self._last_beat = 0.0
        self._last_maintenance = 0.0

    # -- control ------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop claiming and drain (what the first SIGTERM does)."""
        self._stopping.set()
        self.wake.set()

    def _on_signal(self, signum, _frame) -> None:
        self._signals += 1
        if self._signals > 1:
            log.warning("second signal: exiting now")
            os._exit(1)
        log.info(
            "%s received: finishing running items (grace %.0fs), then exiting",
            signal.Signals(signum).name,
            self.grace,
        )
        self.request_stop()

    def _on_notify(self, payload: str | None) -> None:
        if payload is None or payload in self._queue_set:
            self.wake.set()

    # -- main loop ----------------------------------------------------------------------

    def run(self) -> int:
        self._queue_set = set(self.queues)
        if self.options.install_signals and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
        listener = listener_mod.shared()
        self._listen_token = listener.subscribe(wq_settings().notify_channel, self._on_notify)
        for n in range(self.concurrency):
            t = threading.Thread(target=self._runner, name=f"workqueue-runner-{n}", daemon=True)
            t.start()
            self._threads.append(t)
        self._settler_thread = threading.Thread(target=self._settler, name="workqueue-settler", daemon=True)
        self._settler_thread.start()
        log.info(
            "worker %s serving %s (concurrency %d%s, batch %d, poll %.1fs)",
            self.worker_id,
            ", ".join(self.queues),
            self.concurrency,
            f", async concurrency {self.async_concurrency}" if self.async_queues else "",
            self.batch,
            self.poll,
        )
        listener.wait_connected(5.0)
        backoff = 0.05
        deadline = self._started + self.options.max_seconds if self.options.max_seconds else None
        try:
            while not self._stopping.is_set():
                if deadline is not None and time.monotonic() >= deadline:
                    log.info("--max-seconds reached")
                    break
                if self.options.max_items is not None and self.processed + self._held() >= self.options.max_items:
                    if self._held() == 0:
                        log.info("--max-items reached")
                        break
                    self.wake.wait(0.05)
                    continue
                try:
                    _drop_if_broken(self.using)
                    self._beat()
                    self._maintenance()
                    claimed, asked = self._claim_pass()
                    backoff = 0.05
                except _DB_ERRORS as exc:
                    log.warning(
                        "database unavailable (%s: %s); retrying in %.2fs",
                        exc.__class__.__name__,
                        exc,
                        backoff,
                    )
                    self._reset_connection()
                    self._stopping.wait(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
                except Exception:
                    # A bug (a hook's, a statement's) must not end the worker, or its supervisor
                    # restarts it into the same error: log it, back off, and go on.
                    log.exception("claim pass failed; retrying in %.2fs", backoff)
                    self._reset_connection()
                    self._stopping.wait(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
                if asked and claimed >= asked:
                    continue  # a full batch: there is probably more, go straight round
                timeout = self.poll
                if deadline is not None:
                    timeout = max(0.0, min(timeout, deadline - time.monotonic()))
                self.wake.wait(timeout)
        finally:
            self._shutdown()
        return 0

    def _held(self) -> int:
        """Claims not yet accounted for, on threads and on the event loop."""
        return self.inflight + self.async_inflight

    def _claim_pass(self) -> tuple[int, int]:
        claimed = asked = 0
        if self.sync_queues:
            with self._lock:
                free = self.max_inflight - self.inflight if self.inflight <= self.refill_at else 0
            got, want = self._claim_for(self.sync_queues, free, on_loop=False)
            claimed, asked = claimed + got, asked + want
        if self.async_queues:
            with self._lock:
                free = (
                    self.async_concurrency - self.async_inflight if self.async_inflight <= self.async_refill_at else 0
                )
            got, want = self._claim_for(self.async_queues, free, on_loop=True)
            claimed, asked = claimed + got, asked + want
        return claimed, asked

    def _claim_for(self, queues: list[str], free: int, *, on_loop: bool) -> tuple[int, int]:
        if self.options.max_items is not None:
            free = min(free, self.options.max_items - self.processed - self._held())
        if free <= 0:
            return 0, 0
        from workqueue.models import WorkItem

        result = WorkItem.objects.db_manager(self.using).claim(
            queues, limit=free, worker_id=self.worker_id, relaxed=True
        )
        self.claims += 1
        for item in result.settled:
            log.warning("%r spent its %d attempts on lapsed leases; failed", item, item.max_attempts)
        if result.items:
            conf = wq_settings()
            by_queue: dict[str, list[Item]] = {}
            for item in result.items:
                by_queue.setdefault(item.queue, []).append(item)
            hold_of: dict[int, Hold] = {}  # by id(item): this claim's Item objects
            for queue, items in by_queue.items():
                qconf = conf.queue(queue)
                # The stall clock starts when a runner starts the handler, not now: an item
                # may wait in the run queue longer than its stall budget.
                for hold in self.keeper.hold_many(items, lease=qconf.lease, stall=qconf.stall, started=False):
                    hold_of[id(hold.item)] = hold
            holds = [hold_of[id(item)] for item in result.items]  # claim order
            with self._lock:
                if on_loop:
                    self.async_inflight += len(holds)
                    self._async_holds.update(holds)
                else:
                    self.inflight += len(holds)
                self._holds.update(holds)
            put = self._submit_async if on_loop else self._runq.put
            for hold in holds:
                put(hold)
        return len(result.items), free

    def _reset_connection(self) -> None:
        try:
            connections[self.using].close()
        except Exception:
            pass

    def _beat(self, state: str = "running", force: bool = False) -> None:
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
                "processed": self.processed,
                "failed": self.failed,
            },
            using=self.using,
        )
        self._last_beat = now

    def _maintenance(self) -> None:
        every = self.options.maintenance
        if not every or time.monotonic() - self._last_maintenance < every:
            return
        self._last_maintenance = time.monotonic()
        from workqueue import maintenance

        for name in ("recover", "reap"):
            try:
                maintenance.run_sweep(name, using=self.using)
            except _DB_ERRORS:
                raise
            except Exception:
                log.exception("%s failed", name)

    # -- runners ------------------------------------------------------------------------

    def _runner(self) -> None:
        try:
            while True:
                hold = self._runq.get()
                if hold is None:
                    return
                try:
                    self._run_one(hold)
                except BaseException:
                    # Never lose a runner (a slot of capacity) or leave the item counted in flight.
                    log.exception("%r: runner error; its lease will lapse and it will be retried", hold.item)
                    self._finished(hold, ok=False)
        finally:
            connections.close_all()

    def _run_one(self, hold: Hold) -> None:
        _drop_if_broken(self.using)
        if self._draining:
            self._give_back([hold])  # shutting down: do not start it
            return
        ctx = self._start(hold)
        if ctx is None:
            return
        traced = tracing.start_run(hold.item, self.worker_id)
        try:
            returned = registry.get(hold.item.queue).fn(hold.item, ctx)
        except BaseException as exc:
            # KeyboardInterrupt, SystemExit, GeneratorExit and the like from a handler fail that
            # item like any exception. They cannot mean "shut down": signals reach the worker
            # on its main thread (SIGINT/SIGTERM handlers), never as an exception in a runner.
            # They must not take a runner thread (a slot of this worker's capacity) with them.
            tracing.end_run(traced, self._conclude(hold, ctx, exc), exc)
            return
        if inspect.isawaitable(returned):
            # The handler's work goes on as a coroutine (an async operation, an async task):
            # the loop awaits it and this thread is free again.
            self._hand_to_loop(hold, ctx, returned, tracing.handoff(traced))
            return
        tracing.end_run(traced, self._conclude(hold, ctx, None))

    def _start(self, hold: Hold) -> Context | None:
        """Make the run's Context (None: its lease went while it waited, so it does not run)."""
        item = hold.item
        with self._lock:
            if hold.is_cancelled():
                ctx = None  # lost (or given up) while it waited here: someone else may have it now
            else:
                ctx = Context(item, hold, self.worker_id, self.using)
                self._running[hold] = ctx
        if ctx is None:
            log.warning("%r: its lease went while it waited to start (%s); not running it", item, hold.reason)
            self._finished(hold, ok=False)
            return None
        hold.progress()  # starts the stall clock: the budget counts from the start, not the claim
        if registry.get(item.queue).renews_lease:
            # The handler keeps its own lease from here on (operations' progress flushes).
            self.keeper.drop(hold)
        return ctx

    def _conclude(self, hold: Hold, ctx: Context, exc: BaseException | None) -> str:
        """Apply the outcome rules to a run that ended (``exc``: what it raised); return the
        outcome its span records. The same for a thread's run and a coroutine's."""
        item = hold.item
        ended = "succeeded"
        # A coroutine cancelled because its hold was (lease lost, stall, stop, shutdown) has
        # stopped like a sync handler that returned after it was cancelled.
        stopped = isinstance(exc, asyncio.CancelledError) and hold.is_cancelled()
        try:
            if exc is None or stopped:
                pass
            elif isinstance(exc, Retry | Permanent):
                ended = self._fail(item, ctx, *failure_of(exc))
            elif isinstance(exc, LeaseLost):
                log.warning("%r: lease lost while running; not settled", item)
                ended = "lost"
                with self._lock:
                    self.lost += 1
            elif isinstance(exc, _DB_ERRORS) and not connections[self.using].is_usable():
                connections[self.using].close()
                ended = "released"
                if not ctx.settled:
                    self._connection_lost(item, ctx, exc)
            else:
                log.warning("%r: handler raised %s: %s", item, exc.__class__.__name__, exc)
                ended = self._fail(item, ctx, *failure_of(exc))
        finally:
            with self._lock:
                self._running.pop(hold, None)
            if ctx._settling and not ctx.settled:
                hold.settling = False  # the handler's settlement rolled back: the item is still held
        if exc is not None and not stopped:
            self._finished(hold, ok=False)
            return ended
        if not ctx.settled and (stopped or ctx.is_cancelled()):
            # A handler that returns after it was cancelled has stopped, not finished. Leave
            # the item as the cancellation left it (released at shutdown, reclaimable after a
            # stall, someone else's after a lost lease) instead of marking it succeeded.
            log.warning(
                "%r %s after it was cancelled (%s); not settled",
                item,
                "stopped" if stopped else "returned",
                hold.reason or "cancelled",
            )
            self._finished(hold, ok=False)
            return "cancelled"
        if not ctx.settled:
            hold.settling = True
            with self._settle_cv:
                self._settle.append(hold)
                if len(self._settle) == 1:
                    self._settle_cv.notify()  # the settler sleeps only when its list is empty
            return ended
        self._finished(hold, ok=True)
        return ended

    # -- the event loop (async def handlers) --------------------------------------------

    def _async_pool(self) -> AsyncPool:
        with self._lock:
            if self._pool is None:
                self._pool = AsyncPool(self.async_concurrency)
                self._pool.start()
            return self._pool

    def _submit_async(self, hold: Hold) -> None:
        self._async_pool().submit(hold, lambda: self._run_async(hold))

    async def _run_async(self, hold: Hold) -> None:
        pool = self._async_pool()
        if self._draining:
            await pool.run_sync(self._give_back, [hold])
            return
        ctx = self._start(hold)
        if ctx is None:
            return
        traced = tracing.start_run(hold.item, self.worker_id)
        await self._await_run(hold, ctx, traced, registry.get(hold.item.queue).fn, hold.item, ctx)

    def _hand_to_loop(self, hold: Hold, ctx: Context, awaitable, traced) -> None:
        """Move a run whose handler returned an awaitable from this thread to the event loop."""
        with self._lock:
            self.inflight -= 1
            self.async_inflight += 1
            self._async_holds.add(hold)
            refill = self.inflight <= self.refill_at

        async def resume() -> None:
            tracing.resume(traced)
            await self._await_run(hold, ctx, traced, _await, awaitable)

        self._async_pool().submit(hold, resume)
        if refill:
            self.wake.set()

    async def _await_run(self, hold: Hold, ctx: Context, traced, fn, *args) -> None:
        pool = self._async_pool()
        error = None
        try:
            await pool.call_handler(fn, *args)
        except BaseException as exc:  # CancelledError too: _conclude tells a stop from a failure
            error = exc
        if error is None:
            ended = self._conclude(hold, ctx, None)  # no database work on this path
        else:
            ended = await pool.run_sync(self._conclude, hold, ctx, error)
        tracing.end_run(traced, ended, None if isinstance(error, asyncio.CancelledError) else error)

    def _connection_lost(self, item: Item, ctx: Context, exc: BaseException) -> None:
        """The connection died under the handler (a restart, a killed backend, an idle-in-transaction
        timeout). Not the item's fault the first times: it goes back with its attempt refunded. A
        run that keeps losing it (a handler that kills its own backend) must not loop for ever:
        past CONNECTION_LOSS_REFUNDS losses in a row, each loss costs the attempt.

        The count lives in the item's last_error, which every such loss writes and every other
        recorded failure overwrites, so it holds across workers and restarts without a column
        (a lapsed lease in between does not end the row: it records nothing).
        """
        losses = connection_losses(item.last_error) + 1
        detail = f"{exc.__class__.__name__}: {str(exc).strip()}"
        if losses > wq_settings().connection_loss_refunds:
            log.warning("%r: database connection lost while running (%d in a row); charging the attempt", item, losses)
            self._fail(item, ctx, f"{_LOST_CONNECTION} ({losses} in a row; the attempt is charged): {detail}")
            return
        log.warning(
            "%r: database connection lost while running (%d in a row); released without charging the attempt",
            item,
            losses,
        )
        ctx._hold.settling = True
        error = f"{_LOST_CONNECTION} ({losses} in a row; released without charging the attempt): {detail}"
        from workqueue.models import WorkItem

        for attempt in range(3):  # the server may be coming back from a restart
            try:
                if not WorkItem.objects.db_manager(self.using).release_lost_connection(item, error):
                    with self._lock:
                        self.lost += 1
                return
            except _DB_ERRORS:
                connections[self.using].close()
                time.sleep(0.2 * (attempt + 1))
            except Exception:
                log.exception("%r: could not release it", item)
                break
        log.error("%r: could not release it; its lease will lapse and it will be retried", item)

    def _fail(self, item: Item, ctx: Context, error: str, delay=None, permanent=False) -> str:
        """Record the handler's failure; return what became of the item (retried, failed, lost...)."""
        if ctx.settled:
            return "settled"
        if ctx._hold is not None:
            ctx._hold.settling = True
        from workqueue.models import WorkItem

        for attempt in range(3):
            try:
                verdict = WorkItem.objects.db_manager(self.using).fail(item, error, delay=delay, permanent=permanent)
                log.info("%r %s: %s", item, verdict, error.splitlines()[0] if error else "")
                return verdict
            except LeaseLost:
                with self._lock:
                    self.lost += 1
                return "lost"
            except _DB_ERRORS:
                connections[self.using].close()
                time.sleep(0.2 * (attempt + 1))
            except Exception:
                log.exception("%r: could not record the failure", item)
                break
        log.error("%r: could not record the failure; its lease will lapse and it will be retried", item)
        return "lost"

    def _finished(self, hold: Hold, *, ok: bool) -> None:
        """Account for a claim this worker is done with (once: a second call does nothing)."""
        with self._lock:
            if hold not in self._holds:
                return
            self._holds.discard(hold)
            if hold in self._async_holds:
                self._async_holds.discard(hold)
                self.async_inflight -= 1
                refill = self.async_inflight <= self.async_refill_at
            else:
                self.inflight -= 1
                refill = self.inflight <= self.refill_at
            self.processed += 1
            if ok:
                self.succeeded += 1
            else:
                self.failed += 1
        self.keeper.drop(hold)
        if refill:
            self.wake.set()

    # -- settler ------------------------------------------------------------------------

    def _settler(self) -> None:
        from workqueue.models import WorkItem

        manager = WorkItem.objects.db_manager(self.using)
        try:
            while True:
                with self._settle_cv:
                    while not self._settle:
                        if self._settler_done:
                            return
                        self._settle_cv.wait(0.5)
                if len(self._settle) < self.batch // 4 and not self._settler_done:
                    # Let a few more finish: one statement settles them all (a millisecond of
                    # delay before settling costs nothing; a statement per item costs throughput).
                    time.sleep(0.001)
                with self._settle_cv:
                    batch, self._settle = self._settle, []
                items = [hold.item for hold in batch]  # each hold marked settling when queued
                for attempt in range(5):
                    try:
                        _settled, lost = manager.complete_many(items)
                        break
                    except _DB_ERRORS as exc:
                        log.warning("settling %d items failed (%s); retrying", len(batch), exc.__class__.__name__)
                        connections[self.using].close()
                        time.sleep(0.2 * (attempt + 1))
                    except Exception:
                        log.exception("settling %d items failed; their leases will lapse", len(batch))
                        lost = items
                        break
                else:
                    lost = items
                if lost:
                    log.warning("%d item(s) not settled: lease lost (%s)", len(lost), ", ".join(map(repr, lost[:5])))
                    with self._lock:
                        self.lost += len(lost)
                lost_items = {id(i) for i in lost}  # these Item objects: one per claim
                for hold in batch:
                    self._finished(hold, ok=id(hold.item) not in lost_items)
        finally:
            connections.close_all()

    _settler_done = False

    # -- shutdown -----------------------------------------------------------------------

    def _shutdown(self) -> None:
        self._stopping.set()
        if self._listen_token is not None:
            listener_mod.shared().unsubscribe(self._listen_token)
        # Items claimed but not started go straight back.
        self._draining = True
        waiting = []
        while True:
            try:
                hold = self._runq.get_nowait()
            except stdqueue.Empty:
                break
            if hold is not None:
                waiting.append(hold)
        self._give_back(waiting)
        deadline = time.monotonic() + self.grace
        while time.monotonic() < deadline:
            with self._lock:
                if self._held() == 0:
                    break
            time.sleep(0.02)
        with self._lock:
            leftover = list(self._running.values())
        if leftover:
            log.warning("grace period over: releasing %d running item(s)", len(leftover))
            # Release first, then cancel: once the proofs are revoked nothing the handlers
            # do on their way out can settle the items.
            holds = [ctx._hold for ctx in leftover]
            self._release(holds, "shutdown")
            for hold in holds:
                hold.cancel("shutdown")
                self.keeper.drop(hold)  # released: nothing left to renew
        if self._pool is not None:
            # Coroutines whose holds were just cancelled stop at their next await; then the loop ends.
            self._pool.stop(timeout=2.0 if leftover else 5.0)
            with self._lock:
                unstarted = [
                    h for h in self._holds if h in self._async_holds and h not in self._running and not h.settling
                ]
            self._give_back(unstarted)  # handed to the loop, never started by it
        for _ in self._threads:
            self._runq.put(None)
        with self._settle_cv:
            self._settler_done = True
            self._settle_cv.notify_all()
        for t in self._threads:
            t.join(0.5 if leftover else 5.0)
        self._settler_thread.join(10)  # what finished in the grace period gets settled
        self.keeper.close()
        try:
            self._beat("stopped", force=True)
        except Exception:
            pass
        log.info(
            "worker %s stopped: %d processed (%d failed, %d leases lost)",
            self.worker_id,
            self.processed,
            self.failed,
            self.lost,
        )
        connections.close_all()

    def _give_back(self, holds: list[Hold]) -> None:
        """Release claimed items that never started (refunding their attempts)."""
        if not holds:
            return
        self._release(holds, "not started")
        for hold in holds:
            with self._lock:
                if hold in self._holds:
                    self._holds.discard(hold)
                    if hold in self._async_holds:
                        self._async_holds.discard(hold)
                        self.async_inflight -= 1
                    else:
                        self.inflight -= 1
            self.keeper.drop(hold)

    def _release(self, holds: list[Hold], why: str) -> None:
        from workqueue.models import WorkItem

        for hold in holds:
            hold.settling = True  # the release takes the proofs: not a lost lease
        try:
            released = WorkItem.objects.db_manager(self.using).release_many([hold.item for hold in holds])
            log.info("released %d item(s) back to queued (%s)", len(released), why)
        except Exception:
            log.exception("could not release %d item(s); their leases will lapse", len(holds))


_LOST_CONNECTION = "database connection lost while running"
_LOSSES = re.compile(re.escape(_LOST_CONNECTION) + r" \((\d+) in a row")


def connection_losses(last_error: str | None) -> int:
    """How many connection losses in a row an item's last_error records (0 for anything else)."""
    found = _LOSSES.match(last_error or "")
    return int(found.group(1)) if found else 0


def _drop_if_broken(using: str) -> None:
    """Close this thread's connection if an error left it unusable.

    Deliberately not close_old_connections(): a worker keeps its connections (and their
    prepared statements) for its whole life, whatever CONN_MAX_AGE says for requests.
    """
    conn = connections[using]
    if conn.connection is not None and conn.errors_occurred:
        if conn.is_usable():
            conn.errors_occurred = False
        else:
            conn.close()


def failure_of(exc: BaseException) -> tuple[str, float | None, bool]:
    """How a handler's exception fails its item: (last_error, retry delay or None, permanent)."""
    if isinstance(exc, Retry):
        return str(exc), exc.delay, False
    if isinstance(exc, Permanent):
        return f"{exc.__class__.__name__}: {exc}", None, True
    return _describe(exc), None, False


def _describe(exc: BaseException) -> str:
    """``Class: message`` plus the innermost frames, bounded, for last_error."""
    tb = traceback.format_exception(exc)
    text = f"{exc.__class__.__module__}.{exc.__class__.__qualname__}: {exc}\n" + "".join(tb[-4:])
    return text[:8192]


async def _await(awaitable):
    return await awaitable


def run_worker(options: WorkerOptions) -> int:
    """Build a Worker and run it; the entry point ``runworker`` calls."""
    return Worker(options).run()
