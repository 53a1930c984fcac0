"""The asyncio runner pool: ``async def`` handlers on one event loop thread per process.

``runworker`` starts one ``AsyncRunnerPool`` when it serves a queue whose handler is a
coroutine function (or when a sync handler hands its run on as a coroutine: an ``async def``
operation kind or task). The pool runs up to ``--async-concurrency`` handlers at once (default
``WORKQUEUE["ASYNC_CONCURRENCY"]``, 100) on its loop, beside the threads that run sync
handlers, so a process serving both kinds of queue does both and a sync handler never blocks
the loop. It is a runner pool like the threads' (``workqueue.worker.pools``): the same
``Runs.begin`` / ``Runs.end`` around each handler, so every outcome rule is the same.

Cancellation: the lease keeper (or a shutdown, or a lost lease) cancels a run by setting its
hold's ``cancelled`` event, as for a sync handler. The pool's watchdog sees the flag within
``WATCH_INTERVAL`` and cancels the handler's task, so the handler gets ``CancelledError`` at
its next ``await`` (it can also test ``ctx.cancelled.is_set()`` between steps). A handler that
computes for a long time without awaiting holds the whole loop: it is cancelled at its next
await, and the loop's other handlers carry on from there.

The ORM from an async handler, the documented Django way: the ORM's async methods
(``await Model.objects.acreate(...)``, ``aget``, ``async for``) or ``sync_to_async(fn)``.
Both are ``thread_sensitive`` by default, which outside a request would put every handler's
database work on one process-wide thread; the pool runs each handler in its own
``asgiref`` ``ThreadSensitiveContext`` instead (what Django's ASGI handler does per request),
so each handler gets its own thread (and connection) for them, made only if it uses one and
closed when it ends. ``sync_to_async(fn, thread_sensitive=False)`` runs ``fn`` on the loop's
executor instead (a bounded pool of threads, each with its own connection).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import threading
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.db import connections

from workqueue import tracing

log = logging.getLogger("workqueue.worker.pools.eventloop")

#: Seconds between the watchdog's looks at the running handlers' cancel flags.
WATCH_INTERVAL = 0.05


_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncRunnerPool] = weakref.WeakKeyDictionary()


async def off_loop(fn: Callable, *args, **kwargs):
    """Run blocking ``fn`` (a database write) without blocking the event loop; return its value.

    On ``runworker``'s loop it runs on the pool's executor; anywhere else (``testing.drain``,
    a test under ``async_to_sync``) it is ``sync_to_async(fn)``, back on the calling thread
    and inside its transaction.
    """
    pool = _pools.get(asyncio.get_running_loop())
    if pool is None:
        from asgiref.sync import sync_to_async

        return await sync_to_async(fn)(*args, **kwargs)
    return await pool.run_sync(functools.partial(fn, *args, **kwargs))


async def _await(awaitable):
    return await awaitable


def is_async(fn: Callable) -> bool:
    """Whether ``fn`` is a coroutine function (or an object whose ``__call__`` is one)."""
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004  (an object with an async __call__)
    return call is not None and not inspect.isfunction(fn) and inspect.iscoroutinefunction(call)


class AsyncRunnerPool:
    """One event loop on its own thread running claimed items' ``async def`` handlers.

    ``submit(holds)`` (from the claim loop) starts a task per hold; ``resume`` continues a run
    whose sync handler returned an awaitable. ``runs`` is the worker's ``Runs``: ``begin``
    before the handler, ``end`` after it (off the loop when it may write). Blocking work goes
    through ``run_sync`` (the pool's executor).
    """

    def __init__(self, runs, concurrency: int, *, name: str = "workqueue-async", sync_threads: int = 8):
        if concurrency < 1:
            raise ValueError("async concurrency must be at least 1")
        self.runs = runs
        self.concurrency = concurrency
        self.name = name
        self.loop = asyncio.new_event_loop()
        # Settling writes and sync_to_async(thread_sensitive=False) calls run here, off the loop.
        self.executor = _ClosingExecutor(max_workers=sync_threads, thread_name_prefix=f"{name}-sync")
        self.loop.set_default_executor(self.executor)
        _pools[self.loop] = self
        self._thread = threading.Thread(target=self._run, name=f"{name}-loop", daemon=True)
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._active = 0  # submitted and not yet ended
        self._tasks: dict[asyncio.Task, Any] = {}  # task -> its hold; on the loop thread only
        self._cancellable: set[asyncio.Task] = set()  # tasks inside their handler (loop thread only)
        self._stopped = False
        self._waiting: set = set()  # submitted, not begun (take_waiting hands them back)
        self.peak = 0

    # -- from any thread ----------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(10)

    @property
    def active(self) -> int:
        """Jobs submitted and not yet ended."""
        return self._active

    def free(self) -> int:
        return max(0, self.concurrency - self._active)

    # -- the runner pool (workqueue.worker.pools.base.RunnerPool) --------------------------

    def submit(self, holds: list) -> None:
        """Run these claimed items' handlers on the loop (never blocks)."""
        with self._lock:
            self._waiting.update(holds)
        for hold in holds:
            self._submit(hold, functools.partial(self._begin_and_run, hold))

    def resume(self, hold, ctx, awaitable, traced) -> None:
        """Await what a sync handler returned as the rest of its run (thread-safe)."""

        async def rest() -> None:
            tracing.resume(traced)
            await self._await(hold, ctx, traced, _await, awaitable)

        self._submit(hold, rest)

    def take_waiting(self) -> list:
        """Take back the submitted items whose tasks have not begun them."""
        with self._lock:
            waiting, self._waiting = list(self._waiting), set()
        return waiting

    async def _begin_and_run(self, hold) -> None:
        with self._lock:
            if hold not in self._waiting:
                return  # taken back (shutdown gives it back)
            self._waiting.discard(hold)
        runs = self.runs
        if runs.draining.is_set():
            await self.run_sync(runs.begin, hold)  # gives it back: a database write
            return
        started = runs.begin(hold)  # nothing here touches the database while not draining
        if started is None:
            return
        handler, ctx = started
        traced = tracing.start_run(hold.item, runs.worker_id)
        await self._await(hold, ctx, traced, handler.fn, hold.item, ctx)

    async def _await(self, hold, ctx, traced, fn, *args) -> None:
        error = None
        try:
            await self.call_handler(fn, *args)
        except BaseException as exc:  # CancelledError too: Runs.end tells a stop from a failure
            error = exc
        if error is None:
            ended = self.runs.end(hold, ctx, None)  # a completion: queued in memory for the settler
        else:
            ended = await self.run_sync(self.runs.end, hold, ctx, error)
        tracing.end_run(traced, ended, None if isinstance(error, asyncio.CancelledError) else error)

    def _submit(self, hold, job: Callable[[], Awaitable[None]]) -> None:
        with self._lock:
            self._active += 1
            self.peak = max(self.peak, self._active)
        self.loop.call_soon_threadsafe(self._spawn, hold, job)

    def stop(self, timeout: float = 5.0) -> None:
        """Let cancelled handlers stop, cancel what still runs, end the loop and its thread."""
        if self._stopped:
            return
        self._stopped = True
        if self._thread.is_alive():
            fut = asyncio.run_coroutine_threadsafe(self._cancel_all(timeout), self.loop)
            try:
                fut.result(timeout + 1)
            except Exception:
                log.exception("stopping the async pool")
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout)
        self.executor.shutdown(wait=True, cancel_futures=True)

    # -- on the loop --------------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        watchdog = self.loop.create_task(self._watch(), name=f"{self.name}-watchdog")
        try:
            self.loop.run_forever()
        finally:
            watchdog.cancel()
            try:
                self.loop.run_until_complete(asyncio.gather(watchdog, return_exceptions=True))
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            finally:
                self.executor.close_connections()  # before close(): closing the loop shuts its executor down
                self.loop.close()
                connections.close_all()

    def _spawn(self, hold, job) -> None:
        task = self.loop.create_task(self._guarded(hold, job))
        self._tasks[task] = hold

    async def _guarded(self, hold, job) -> None:
        try:
            await job()
        except asyncio.CancelledError:
            pass  # a cancelled job accounted for itself, or the pool is stopping
        except BaseException:
            # Never leave the item counted in flight (Runs.crashed logs it).
            self.runs.crashed(hold)
        finally:
            task = asyncio.current_task()
            if task is not None:
                self._tasks.pop(task, None)
            with self._lock:
                self._active -= 1

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(WATCH_INTERVAL)
            for task in list(self._cancellable):
                hold = self._tasks.get(task)
                if hold is not None and hold.is_cancelled() and not task.cancelling():
                    task.cancel()

    async def _cancel_all(self, timeout: float) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)

    async def run_sync(self, fn: Callable, *args):
        """Run blocking ``fn(*args)`` on the pool's executor (in this task's context: its span)."""
        return await self.loop.run_in_executor(self.executor, contextvars.copy_context().run, fn, *args)

    async def call_handler(self, fn: Callable, *args):
        """Await ``fn(*args)`` as the current task's handler: cancellable by its hold's flag,
        in its own thread-sensitive context (its own thread for the ORM's async methods)."""
        from asgiref.sync import SyncToAsync, ThreadSensitiveContext, sync_to_async

        task = asyncio.current_task()
        assert task is not None  # called from a task on the loop
        self._cancellable.add(task)
        try:
            async with ThreadSensitiveContext() as context:
                try:
                    return await fn(*args)
                finally:
                    self._cancellable.discard(task)
                    if SyncToAsync.context_to_thread_executor.get(context) is not None:
                        # The handler used the ORM through a thread of its own: close that
                        # thread's connection before the thread goes.
                        await asyncio.shield(sync_to_async(connections.close_all)())
        finally:
            self._cancellable.discard(task)


class _ClosingExecutor(ThreadPoolExecutor):
    """A thread pool whose threads' database connections can be closed before it shuts down
    (each thread that ran work has its own Django connection; Django closes none of them)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._used: set[threading.Thread] = set()

    def submit(self, fn, /, *args, **kwargs):
        return super().submit(self._tracked, fn, *args, **kwargs)

    def _tracked(self, fn, *args, **kwargs):
        self._used.add(threading.current_thread())
        return fn(*args, **kwargs)

    def close_connections(self, timeout: float = 5.0) -> None:
        """Run ``connections.close_all()`` once on every thread that ran work."""
        parties = len(self._used)
        if not parties:
            return
        # A barrier holds each thread on its own call, so every one of them makes exactly one.
        barrier = threading.Barrier(parties)

        def close() -> None:
            try:
                connections.close_all()
            finally:
                try:
                    barrier.wait(timeout)
                except threading.BrokenBarrierError:
                    pass

        futures = [ThreadPoolExecutor.submit(self, close) for _ in range(parties)]
        for future in futures:
            try:
                future.result(timeout + 1)
            except Exception:
                pass
