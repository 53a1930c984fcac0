"""Stopping a worker: graceful on the first SIGTERM/SIGINT, at once on the second.

``request_stop`` (what the first signal does) stops claiming. ``drain`` then, in order:
gives back the items claimed but not started (refunding their attempts); waits up to the
grace period for running handlers to finish (their completions still get settled); releases
what is still running back to queued and only then cancels it (once the proofs are revoked,
nothing a handler does on its way out can settle its item); stops the runners and the settler.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

from workqueue.states import StopReason
from workqueue.worker.lease import LeaseKeeper
from workqueue.worker.ledger import Ledger
from workqueue.worker.loop import Signal
from workqueue.worker.pools.base import RunnerPool
from workqueue.worker.settler import Settler

log = logging.getLogger("workqueue.worker")


class Shutdown:
    def __init__(self, *, grace: float, wake: Signal):
        self.grace = grace
        self.wake = wake
        self.stopping = threading.Event()  # stop claiming
        self.draining = threading.Event()  # and start nothing more: runners give items back
        self._signals = 0

    def request_stop(self) -> None:
        """Stop claiming and drain (what the first SIGTERM does)."""
        self.stopping.set()
        self.wake.set()

    def install_signals(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

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

    def drain(self, *, pools: list[RunnerPool], settler: Settler, ledger: Ledger, keeper: LeaseKeeper) -> None:
        self.stopping.set()
        self.draining.set()
        for pool in pools:
            settler.give_back(pool.take_waiting())  # claimed but not started: straight back
        deadline = time.monotonic() + self.grace
        while time.monotonic() < deadline and ledger.inflight:
            time.sleep(0.02)
        leftover = ledger.running()
        if leftover:
            log.warning("grace period over: releasing %d running item(s)", len(leftover))
            # Release first, then cancel: once the proofs are revoked nothing the handlers
            # do on their way out can settle the items.
            settler.release(leftover, "shutdown")
            for hold in leftover:
                hold.cancel(StopReason.SHUTDOWN)
                keeper.drop(hold)  # released: nothing left to renew
        for pool in pools:  # an event loop's cancelled coroutines stop at their next await
            pool.stop(0.5 if leftover else 5.0)
        settler.stop(10)  # what finished in the grace period gets settled
