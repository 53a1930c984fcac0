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
      own ``transaction.atomic()`` so the settlement commits with your writes.
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
            "worker %s serving %s (concurrency %d, batch %d, poll %.1fs)",
            self.worker_id,
            ", ".join(self.queues),
            self.concurrency,
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
                if self.options.max_items is not None and self.processed + self.inflight >= self.options.max_items:
                    if self.inflight == 0:
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

    def _claim_pass(self) -> tuple[int, int]:
        with self._lock:
            free = self.max_inflight - self.inflight
            if self.inflight > self.refill_at:
                return 0, 0
        if self.options.max_items is not None:
            free = min(free, self.options.max_items - self.processed - self.inflight)
        if free <= 0:
            return 0, 0
        from workqueue.models import WorkItem

        result = WorkItem.objects.db_manager(self.using).claim(
            self.queues, limit=free, worker_id=self.worker_id, relaxed=True
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
                self.inflight += len(holds)
                self._holds.update(holds)
            put = self._runq.put
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
        item = hold.item
        _drop_if_broken(self.using)
        handler = registry.get(item.queue)
        if self._draining:
            self._give_back([hold])  # shutting down: do not start it
            return
        with self._lock:
            if hold.is_cancelled():
                ctx = None  # lost (or given up) while it waited here: someone else may have it now
            else:
                ctx = Context(item, hold, self.worker_id, self.using)
                self._running[hold] = ctx
        if ctx is None:
            log.warning("%r: its lease went while it waited to start (%s); not running it", item, hold.reason)
            self._finished(hold, ok=False)
            return
        hold.progress()  # starts the stall clock: the budget counts from the start, not the claim
        if handler.renews_lease:
            # The handler keeps its own lease from here on (operations' progress flushes).
            self.keeper.drop(hold)
        outcome = None
        traced = tracing.start_run(item, self.worker_id)
        ended, error = "succeeded", None  # what the run's span records
        try:
            handler.fn(item, ctx)
            outcome = "complete"
        except (Retry, Permanent) as exc:
            ended, error = self._fail(item, ctx, *failure_of(exc)), exc
        except LeaseLost as exc:
            log.warning("%r: lease lost while running; not settled", item)
            ended, error = "lost", exc
            with self._lock:
                self.lost += 1
        except _DB_ERRORS as exc:
            error = exc
            if connections[self.using].is_usable():
                log.warning("%r: handler raised %s: %s", item, exc.__class__.__name__, exc)
                ended = self._fail(item, ctx, *failure_of(exc))
            else:
                connections[self.using].close()
                ended = "released"
                if not ctx.settled:
                    self._connection_lost(item, ctx, exc)
        except BaseException as exc:
            # KeyboardInterrupt, SystemExit, GeneratorExit and the like from a handler fail that
            # item like any exception. They cannot mean "shut down": signals reach the worker
            # on its main thread (SIGINT/SIGTERM handlers), never as an exception in a runner.
            # They must not take a runner thread (a slot of this worker's capacity) with them.
            log.warning("%r: handler raised %s: %s", item, exc.__class__.__name__, exc)
            ended, error = self._fail(item, ctx, *failure_of(exc)), exc
        finally:
            with self._lock:
                self._running.pop(hold, None)
            if ctx._settling and not ctx.settled:
                hold.settling = False  # the handler's settlement rolled back: the item is still held
            if outcome == "complete" and not ctx.settled and ctx.is_cancelled():
                ended = "cancelled"
            tracing.end_run(traced, ended, error)
        if outcome == "complete" and not ctx.settled and ctx.is_cancelled():
            # A handler that returns after it was cancelled has stopped, not finished. Leave
            # the item as the cancellation left it (released at shutdown, reclaimable after a
            # stall, someone else's after a lost lease) instead of marking it succeeded.
            log.warning("%r returned after it was cancelled (%s); not settled", item, hold.reason or "cancelled")
            self._finished(hold, ok=False)
            return
        if outcome == "complete" and not ctx.settled:
            hold.settling = True
            with self._settle_cv:
                self._settle.append(hold)
                if len(self._settle) == 1:
                    self._settle_cv.notify()  # the settler sleeps only when its list is empty
            return
        self._finished(hold, ok=outcome == "complete")

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
                if self.inflight == 0:
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


def run_worker(options: WorkerOptions) -> int:
    """Build a Worker and run it; the entry point ``runworker`` calls."""
    return Worker(options).run()
