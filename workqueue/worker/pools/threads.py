"""``ThreadRunnerPool``: ``concurrency`` threads, each with its own connection, running sync handlers."""

from __future__ import annotations

import functools
import inspect
import logging
import threading
from typing import TYPE_CHECKING

from django.db import connections

from workqueue import tracing
from workqueue.worker.lease import Hold

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

from workqueue.worker.pools.base import HoldQueue, Runs

log = logging.getLogger("workqueue.worker")


class ThreadRunnerPool(HoldQueue):
    """``concurrency`` threads taking holds from one queue, in claim order."""

    def __init__(self, runs: Runs, concurrency: int):
        super().__init__()
        self.runs = runs
        self.concurrency = concurrency
        self._threads = [
            threading.Thread(target=self._loop, name=f"workqueue-runner-{n}", daemon=True) for n in range(concurrency)
        ]
        # Threads whose run passed its timeout: given up, each leaves once its handler returns
        # (if ever); another thread took its place.
        self._retired: set[threading.Thread] = set()
        self._lock = threading.Lock()

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self, timeout: float) -> None:
        with self._lock:
            live = [t for t in self._threads if t not in self._retired]
        for _ in live:
            self.queue.put(None)
        for t in live:
            t.join(timeout)

    def _replace(self, thread: threading.Thread) -> None:
        """``thread``'s run passed its timeout: it leaves when (if) its handler returns, and a
        new thread takes its place now, so the pool keeps its concurrency."""
        with self._lock:
            self._retired.add(thread)
            new = threading.Thread(target=self._loop, name=f"workqueue-runner-{len(self._threads)}", daemon=True)
            self._threads.append(new)
        new.start()

    @property
    def abandoned(self) -> int:
        """Threads given up on (a run past its timeout) and still running their handler."""
        return sum(1 for t in self._retired if t.is_alive())

    def _loop(self) -> None:
        # This thread's wrapper: Django gives each thread its own and keeps it for the thread's
        # life (closing it keeps the wrapper), so look it up once, not per item.
        connection = connections[self.runs.using]
        replace_me = functools.partial(self._replace, threading.current_thread())  # if a run times out
        try:
            while True:
                hold = self.queue.get()
                if hold is None:
                    return
                try:
                    self._run_one(hold, connection, replace_me)
                except BaseException:
                    # Never lose a runner (a slot of capacity) or leave the item counted in flight.
                    self.runs.crashed(hold)
                if self._retired and threading.current_thread() in self._retired:
                    return  # given up on: another thread has this one's place
        finally:
            connections.close_all()

    def _run_one(self, hold: Hold, connection: BaseDatabaseWrapper | None = None, replace_me=None) -> None:
        started = self.runs.begin(hold, connection, on_abandon=replace_me)
        if started is None:
            return
        handler, ctx = started
        traced = tracing.start_run(hold.item, self.runs.worker_id)
        exc: BaseException | None = None
        try:
            returned = handler.fn(hold.item, ctx)
        except BaseException as raised:  # every ending is the settler's to judge (outcome_of)
            exc = raised
        else:
            if returned is not None and inspect.isawaitable(returned):
                # The handler's work goes on as a coroutine: the loop awaits it, this thread is free.
                self.runs.to_loop(hold, ctx, returned, tracing.handoff(traced))
                return
        tracing.end_run(traced, self.runs.end(hold, ctx, exc), exc)
