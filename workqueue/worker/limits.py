"""Time limits the worker enforces on running handlers itself, within a tick of the limit.

``Watchdog`` (one thread per ``runworker``) looks at the runs that have limits every
``TICK`` seconds:

- past ``soft_timeout``: the run is told to stop (``ctx.stop("timeout")``: ``ctx.cancelled``
  set, ``ctx.stop_reason == "timeout"``; an operation's reporter sees the same);
- past ``timeout``: the run is ended. Its item is given up (``WorkItem.objects.give_up_timed_out``:
  retried or failed as its attempts say, in one transaction with the hooks that mirror it,
  so an operation follows), its hold is marked abandoned so the run can no longer settle it,
  and the pool is told (``on_timeout``): the process pool kills and replaces the child, the
  thread pool starts another thread in place of the one still running the handler.

Limits come from the handler's registration (``handlers.register(..., soft_timeout=,
timeout=)``) or from the run itself (``ctx.time_limits(...)``: an operation kind's own, set
once its kind is known). The clock starts when the run starts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from workqueue.states import StopReason
from workqueue.worker.loop import BackgroundLoop

log = logging.getLogger("workqueue.worker")

TICK = 0.1


class HandlerTimeout(Exception):
    """A run passed its ``timeout``: what its item's failure records."""

    def __init__(self, seconds: float):
        super().__init__(f"the run passed its timeout of {seconds:g}s and was ended by its worker")
        self.seconds = seconds


class SoftTimeout(Exception):
    """An ``async def`` run let its soft timeout's cancel propagate: what its failure records."""

    def __init__(self):
        super().__init__("the run was cancelled at its soft timeout and did not catch it")


class Stoppable(Protocol):
    """What the watchdog tells a run through: its Context (the parent's, on the process pool)."""

    def stop(self, reason: StopReason) -> None: ...


@dataclass
class Watched:
    ctx: Stoppable
    started: float
    soft_timeout: float | None
    timeout: float | None
    on_timeout: Callable[[Any, HandlerTimeout], None]
    told: bool = False


class Watchdog(BackgroundLoop):
    """Tells runs past their soft timeout to stop, and ends runs past their timeout."""

    name = "workqueue-watchdog"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._runs: dict[object, Watched] = {}  # by hold
        self._gone: set = set()  # holds whose timeout ended their run, until the run's own end
        self._lock = threading.Lock()
        self.timeouts = 0
        self.soft_timeouts = 0

    def watch(
        self,
        hold,
        ctx,
        *,
        soft_timeout: float | None,
        timeout: float | None,
        on_timeout: Callable[[Any, HandlerTimeout], None],
        started: float | None = None,
    ) -> None:
        """Watch ``hold``'s run (from ``started``, a monotonic time; now by default)."""
        if soft_timeout is None and timeout is None:
            return
        with self._lock:
            known = self._runs.get(hold)
            self._runs[hold] = Watched(
                ctx,
                known.started if known else (started if started is not None else time.monotonic()),
                soft_timeout,
                timeout,
                on_timeout,
            )
            if not self.running:  # started by the first run with limits, once (under the lock)
                self.start()

    @property
    def active(self) -> bool:
        """Whether any run is watched or was ended (a check without the lock, for the hot path)."""
        return bool(self._runs or self._gone)

    def unwatch(self, hold) -> bool:
        """Stop watching ``hold`` (its run ended); False if its timeout already ended it."""
        with self._lock:
            self._runs.pop(hold, None)
            if hold in self._gone:
                self._gone.discard(hold)
                return False
        return True

    def step(self) -> float | None:
        now = time.monotonic()
        with self._lock:
            due = list(self._runs.items())
        for hold, w in due:
            elapsed = now - w.started
            if w.soft_timeout is not None and not w.told and elapsed >= w.soft_timeout:
                w.told = True
                self.soft_timeouts += 1
                item = getattr(hold, "item", hold)
                log.warning("%r: past its soft timeout of %gs; told to stop", item, w.soft_timeout)
                w.ctx.stop(StopReason.TIMEOUT)
            if w.timeout is not None and elapsed >= w.timeout:
                with self._lock:
                    if self._runs.get(hold) is not w:
                        continue  # it ended meanwhile
                    del self._runs[hold]
                    self._gone.add(hold)
                self.timeouts += 1
                w.ctx.stop(StopReason.TIMEOUT)
                w.on_timeout(hold, HandlerTimeout(w.timeout))
        return TICK

    @property
    def watching(self) -> int:
        return len(self._runs)

    @property
    def limited(self) -> int:
        """Runs under a time limit now, and runs their timeout gave up that have not ended."""
        return len(self._runs) + len(self._gone)
