"""The asyncio runner pool: ``async def`` handlers on one event loop thread per process.

``runworker`` starts one ``AsyncPool`` when it serves a queue whose handler is a coroutine
function. The pool runs up to ``--async-concurrency`` handlers at once (default
``WORKQUEUE["ASYNC_CONCURRENCY"]``, 100) on its loop, beside the threads that run sync
handlers, so a process serving both kinds of queue does both and a sync handler never blocks
the loop.

Cancellation: the lease keeper (or a shutdown, or a lost lease) cancels a run by setting its
hold's ``cancelled`` event, as for a sync handler. The pool's watchdog sees the flag within
``WATCH_INTERVAL`` and cancels the handler's task, so the handler gets ``CancelledError`` at
its next ``await`` (it can also test ``ctx.is_cancelled()`` between steps). A handler that
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

from django.db import connections

log = logging.getLogger("workqueue.aio")

#: Seconds between the watchdog's looks at the running handlers' cancel flags.
WATCH_INTERVAL = 0.05


_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncPool] = weakref.WeakKeyDictionary()


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


def is_async(fn: Callable) -> bool:
    """Whether ``fn`` is a coroutine function (or an object whose ``__call__`` is one)."""
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004  (an object with an async __call__)
    return call is not None and not inspect.isfunction(fn) and inspect.iscoroutinefunction(call)


class AsyncPool:
    """One event loop on its own thread, running at most ``concurrency`` jobs at once.

    A job is ``submit(hold, job)``: ``job`` is a coroutine function of no arguments that runs
    a handler through ``call_handler`` and accounts for the run; ``hold`` is what the watchdog
    watches (anything with ``is_cancelled()``). Blocking work a job must do off the loop (a
    database write to settle its item) goes through ``run_sync``.
    """

    def __init__(self, concurrency: int, *, name: str = "workqueue-async", sync_threads: int = 8):
        if concurrency < 1:
            raise ValueError("async concurrency must be at least 1")
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
        self._tasks: dict[asyncio.Task, object] = {}  # on the loop thread only
        self._cancellable: set[asyncio.Task] = set()  # tasks inside their handler (loop thread only)
        self._stopped = False
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

    def submit(self, hold, job: Callable[[], Awaitable[None]]) -> None:
        """Run ``job()`` on the loop (thread-safe); its end frees its slot."""
        with self._lock:
            self._active += 1
            self.peak = max(self.peak, self._active)
        self.loop.call_soon_threadsafe(self._spawn, hold, job)

    def stop(self, timeout: float = 5.0) -> None:
        """Cancel what still runs, stop the loop and join its thread (and the executor)."""
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
        task = self.loop.create_task(self._guarded(job))
        self._tasks[task] = hold

    async def _guarded(self, job) -> None:
        try:
            await job()
        except asyncio.CancelledError:
            pass  # a cancelled job accounted for itself, or the pool is stopping
        except BaseException:
            log.exception("async job failed outside its handler")
        finally:
            self._tasks.pop(asyncio.current_task(), None)
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
