"""The settler: what happens to an item once its handler ended.

``ending(hold, ctx, exc)`` is called by a runner with the handler's exception (``None``
when it returned). ``outcome_of`` says what that means; a completion is queued for the
settler thread, which completes finished items in batches (one statement for many); a
failure or a refund is written at once on the caller's thread and connection (a dead
connection is that thread's to close). ``release`` / ``give_back`` hand held items back to
queued in one statement (shutdown, items claimed but never started).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django.db import connections

from workqueue.conf import wq_settings
from workqueue.exceptions import LeaseLost
from workqueue.items import Item
from workqueue.worker import metrics
from workqueue.worker.context import Context
from workqueue.worker.lease import Hold
from workqueue.worker.ledger import Ledger
from workqueue.worker.loop import Backoff
from workqueue.worker.outcome import DB_ERRORS, Action, lost_connection_error, outcome_of

log = logging.getLogger("workqueue.worker")


#: How long a write with no lease to go by (none of the worker's writes today) keeps retrying.
RETRY_WITHOUT_LEASE = 10.0


class Settler:
    def __init__(self, ledger: Ledger, *, using: str, batch: int):
        self.ledger = ledger
        self.using = using
        self.batch = batch
        self._pending: list[Hold] = []  # returned handlers' holds, each marked settling
        self._cv = threading.Condition()
        self._done = False
        self._thread = threading.Thread(target=self._loop, name="workqueue-settler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> None:
        """Settle what is queued, then end the settler thread."""
        with self._cv:
            self._done = True
            self._cv.notify_all()
        self._thread.join(timeout)

    # -- a handler's ending (on the runner's thread) --------------------------------------

    def ending(self, hold: Hold, ctx: Context, exc: BaseException | None) -> str:
        """Record how ``hold``'s handler ended; return the outcome (succeeded, retried, failed,
        cancelled, lost, released) for its span."""
        if exc is None and not ctx.settled:
            # The usual ending, first and short: the handler returned without settling.
            ctx.end_run()
            if not hold.is_cancelled() or hold.hurried:
                self._queue_completion(hold)  # Ledger.returned: no longer running, too
                return "succeeded"
            self.ledger.stopped(hold)
            return self._returned_cancelled(hold)
        item = hold.item
        verdict = "succeeded"
        usable = True
        if exc is not None and isinstance(exc, DB_ERRORS):
            usable = connections[self.using].is_usable()
        outcome = outcome_of(exc, connection_usable=usable)
        try:
            if outcome.action is Action.LOST:
                log.warning("%r: lease lost while running; not settled", item)
                self.ledger.count_lost()
                metrics.found_lost(item.queue, hold)
                verdict = "lost"
            elif outcome.action is Action.RELEASE:
                connections[self.using].close()
                verdict = "released"
                if not ctx.settled:
                    self._connection_lost(item, ctx, outcome.error)
            elif outcome.action is not Action.COMPLETE:
                if outcome.unexpected:
                    log.warning("%r: handler raised %s: %s", item, exc.__class__.__name__, exc)
                verdict = self._fail(item, ctx, outcome.error, outcome.delay, outcome.permanent)
        finally:
            self.ledger.stopped(hold)
            ctx.end_run()
        if outcome.action is not Action.COMPLETE or ctx.settled:
            self.ledger.finished(hold, ok=outcome.action is Action.COMPLETE)
        elif hold.is_cancelled() and not hold.hurried:  # told to stop (ctx.is_cancelled(): a cancel only)
            verdict = self._returned_cancelled(hold)
        else:
            self._queue_completion(hold)
        return verdict

    def _queue_completion(self, hold: Hold) -> None:
        """Hand a returned handler's item to the settler thread to complete in its next batch."""
        hold.begin_settling()
        self.ledger.returned(hold)  # not running; its runner's place is free for the next claim
        with self._cv:
            self._pending.append(hold)
            if len(self._pending) == 1:
                self._cv.notify()  # the settler sleeps only when its list is empty

    def _returned_cancelled(self, hold: Hold) -> str:
        # A handler that returns after it was cancelled has stopped, not finished. Leave the
        # item as the cancellation left it (released at shutdown, reclaimable after a stall,
        # someone else's after a lost lease) instead of marking it succeeded.
        log.warning("%r returned after it was cancelled (%s); not settled", hold.item, hold.reason or "cancelled")
        self.ledger.finished(hold, ok=False)
        return "cancelled"

    def _fail(self, item: Item, ctx: Context, error: str, delay: float | None = None, permanent: bool = False) -> str:
        """Record the failure; return what became of the item (retried, failed; lost if not ours)."""
        if ctx.settled:
            return "settled"
        ctx.begin_settling()
        from workqueue.models import WorkItem

        verdicts = []

        def write() -> bool:
            started = time.perf_counter()
            verdict = WorkItem.objects.db_manager(self.using).fail(item, error, delay=delay, permanent=permanent)
            metrics.settled("fail", started)
            log.info("%r %s: %s", item, verdict, error.splitlines()[0] if error else "")
            verdicts.append(verdict)
            return True

        self._write(item, "record the failure", write, ctx.hold)
        return verdicts[0] if verdicts else "lost"

    def _connection_lost(self, item: Item, ctx: Context, detail: str) -> None:
        """The connection died under the handler (a restart, a killed backend, an idle-in-transaction
        timeout). Not the item's fault the first times: it goes back with its attempt refunded;
        past CONNECTION_LOSS_REFUNDS losses in a row each loss costs the attempt (see
        ``outcome.lost_connection_error``).
        """
        from workqueue.models import WorkItem

        manager = WorkItem.objects.db_manager(self.using)
        refunds = wq_settings().connection_loss_refunds
        ctx.begin_settling()

        def write() -> bool:
            before = manager.connection_losses(item)  # once the server answers again
            if before is None:
                return False  # no longer ours
            losses, error, refund = lost_connection_error(before, detail, refunds)
            if refund:
                log.warning(
                    "%r: database connection lost while running (%d in a row); released without charging the attempt",
                    item,
                    losses,
                )
                return manager.release_lost_connection(item, error)
            log.warning("%r: database connection lost while running (%d in a row); charging the attempt", item, losses)
            verdict = manager.fail(item, error, connection_lost=True)
            log.info("%r %s: %s", item, verdict, error.splitlines()[0])
            return True

        self._write(item, "record the lost connection", write, ctx.hold)

    def _write(self, item: Item, what: str, write: Callable[[], bool], hold: Hold | None = None) -> None:
        """Run ``write`` (False or LeaseLost: no longer ours), retrying while the server comes back."""
        retry = Backoff(
            0.2, 1.0, deadline=hold.deadline if hold is not None else time.monotonic() + RETRY_WITHOUT_LEASE
        )
        while True:
            try:
                if not write():
                    self.ledger.count_lost()
                    metrics.found_lost(item.queue, hold)
                return
            except LeaseLost:
                self.ledger.count_lost()
                metrics.found_lost(item.queue, hold)
                return
            except DB_ERRORS:
                connections[self.using].close()
                if not retry.wait():
                    break
            except Exception:
                log.exception("%r: could not %s", item, what)
                break
        log.error("%r: could not %s; its lease will lapse and it will be retried", item, what)

    # -- batched completions (the settler thread) -----------------------------------------

    def _loop(self) -> None:
        from workqueue.models import WorkItem

        manager = WorkItem.objects.db_manager(self.using)
        try:
            while True:
                with self._cv:
                    while not self._pending:
                        if self._done:
                            return
                        self._cv.wait(0.5)
                if len(self._pending) < self.batch // 4 and not self._done:
                    # Let a few more finish: one statement settles them all (a millisecond of
                    # delay before settling costs nothing; a statement per item costs throughput).
                    time.sleep(0.001)
                with self._cv:
                    batch, self._pending = self._pending, []
                items = [hold.item for hold in batch]
                # While the server is away (a restart, a failover) the keeper goes on renewing
                # these leases as soon as it can: keep trying for as long as one may still be ours.
                retry = Backoff(0.2, 1.0, deadline=max(hold.deadline for hold in batch))
                while True:
                    try:
                        started = time.perf_counter()
                        _settled, lost = manager.complete_many(items)
                        metrics.settled("complete_many", started)
                        break
                    except DB_ERRORS as exc:
                        log.warning("settling %d items failed (%s); retrying", len(batch), exc.__class__.__name__)
                        connections[self.using].close()
                        if not retry.wait():
                            lost = items
                            break
                    except Exception:
                        log.exception("settling %d items failed; their leases will lapse", len(batch))
                        lost = items
                        break
                if lost:
                    log.warning("%d item(s) not settled: lease lost (%s)", len(lost), ", ".join(map(repr, lost[:5])))
                    self.ledger.count_lost(len(lost))
                    self._count_lost(batch, lost)
                # These Item objects: one per claim, so an old and a new claim of one item differ.
                self.ledger.finished_many(batch, {id(i) for i in lost})
        finally:
            connections.close_all()

    @staticmethod
    def _count_lost(batch: list[Hold], lost: list[Item]) -> None:
        """Count the lost leases of a batch whose completion found them gone."""
        gone = {id(item) for item in lost}
        for hold in batch:
            if id(hold.item) in gone:
                metrics.found_lost(hold.item.queue, hold)

    # -- giving held items back -------------------------------------------------------------

    def give_back(self, holds: list[Hold]) -> None:
        """Release claimed items that never started (refunding their attempts)."""
        if not holds:
            return
        self.release(holds, "not started")
        for hold in holds:
            self.ledger.given_back(hold)

    def release(self, holds: list[Hold], why: str) -> None:
        from workqueue.models import WorkItem

        for hold in holds:
            hold.released()  # the release takes the proofs: not a lost lease
        try:
            started = time.perf_counter()
            released = WorkItem.objects.db_manager(self.using).release_many([hold.item for hold in holds])
            metrics.settled("release_many", started)
            log.info("released %d item(s) back to queued (%s)", len(released), why)
        except Exception:
            log.exception("could not release %d item(s); their leases will lapse", len(holds))
