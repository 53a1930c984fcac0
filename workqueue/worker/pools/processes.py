"""``ProcessRunnerPool``: sync handlers run in child processes, for CPU-bound work.

What stays in the parent (``runworker``): the claim loop, the lease keeper, the settler, the
watchdog and every hold's lease proof. What crosses the pipe to a child: the claimed item (its
row, proof included, so an operation's own writes in the child are guarded as on a thread), and
a stop when the hold is cancelled; back come the limits a run sets (``ctx.time_limits``), and
the ending: how the handler ended (its exception, pickled when it can be, else its type,
message and traceback as text), whether it settled the item itself, and the child's memory.
The parent then settles the item exactly as for a thread (``Runs.end``).

Each child is started with ``spawn`` (never ``fork``: the parent has threads and open
connections, and a forked child would share its sockets), sets Django up itself and opens its
own database connection. One parent thread serves each child, one run at a time.

A child that dies (SIGKILL, a segfault, the OOM killer) costs only its item's attempt — the run
ends as a failure, "worker process died", retried as its attempts say — and is replaced. A run
past its ``timeout`` has its child killed and replaced (within a tick of the limit); a child
whose memory grew past ``max_memory_mb`` (the handler's, else ``--max-memory-mb``) finishes its
run and is replaced, and so is one that ran ``--max-tasks-per-child`` runs.
"""

from __future__ import annotations

import inspect
import logging
import multiprocessing
import os
import pickle
import queue as stdqueue
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

from workqueue import tracing
from workqueue.worker import metrics
from workqueue.worker.lease import Hold
from workqueue.worker.pools.base import HoldQueue, Runs

log = logging.getLogger("workqueue.worker")

POLL = 0.05  # how often a waiting parent thread looks at its hold and its child
READY_TIMEOUT = 120.0  # a child's Django setup on a loaded machine


class ChildDied(Exception):
    """The child process running a handler died (or was killed) before the run ended."""


class ChildError(Exception):
    """An exception a handler raised in a child that could not cross the pipe as itself: its
    type, message and traceback, as text."""


@dataclass
class Ending:
    exc: BaseException | None
    settled: bool
    rss_mb: float


def _rss_mb() -> float:
    """This process's resident memory now, in MB (Linux: /proc; elsewhere the peak)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _encode(exc: BaseException) -> tuple:
    tb = "".join(traceback.format_exception(exc))[-8192:]
    try:
        data = pickle.dumps(exc)
        pickle.loads(data)
    except Exception:
        data = None
    return (data, f"{type(exc).__module__}.{type(exc).__qualname__}", str(exc), tb)


def _decode(payload: tuple | None) -> BaseException | None:
    if payload is None:
        return None
    data, kind, message, tb = payload
    if data is not None:
        try:
            exc = pickle.loads(data)
            from workqueue.exceptions import LeaseLost, Permanent, Retry

            if isinstance(exc, Retry | Permanent | LeaseLost):
                return exc  # its type decides what becomes of the item
        except Exception:
            pass
    return ChildError(f"{kind}: {message} (in a worker process)\n{tb}")


# -- the child -------------------------------------------------------------------------------


def child_main(conn, settings_module: str | None) -> None:  # pragma: no cover - runs in the child
    """A child process: set Django up, then run what the parent sends until told to exit."""
    if settings_module:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", settings_module)
    # The parent decides about shutdown (its grace period): a terminal's Ctrl-C or a
    # supervisor's SIGTERM to the process group must not end a run halfway.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    import django

    django.setup()
    Child(conn).serve()


class Child:  # pragma: no cover - runs in the child
    def __init__(self, conn):
        self.conn = conn
        self.send_lock = threading.Lock()
        self.runs: stdqueue.SimpleQueue = stdqueue.SimpleQueue()
        self.ctx: Any = None

    def send(self, message) -> None:
        with self.send_lock:
            self.conn.send(message)

    def serve(self) -> None:
        threading.Thread(target=self._read, name="workqueue-child-reader", daemon=True).start()
        self.send(("ready", os.getpid()))
        while True:
            message = self.runs.get()
            if message is None:
                break
            self.run(*message)
        from django.db import connections

        connections.close_all()

    def limit(self, hold, ctx, on_abandon, **limits) -> None:
        """A run set its limits (``ctx.time_limits``): the parent's watchdog enforces them."""
        self.send(("limits", limits))

    def _read(self) -> None:
        """Take the parent's messages; the parent gone (EOF) ends this process at once."""
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                os._exit(1)
            if message[0] == "run":
                self.runs.put(message[1:])
            elif message[0] == "stop":
                ctx = self.ctx
                if ctx is not None:
                    ctx.stop(message[1])
            elif message[0] == "exit":
                self.runs.put(None)
                return

    def run(self, item, worker_id: str, using: str) -> None:
        from workqueue import handlers
        from workqueue.worker.context import Context
        from workqueue.worker.pools.base import drop_if_broken

        ctx = Context(item, None, worker_id, using)
        ctx._limits = (self, None)  # ctx.time_limits() comes to limit(): the parent enforces them
        self.ctx = ctx
        error = None
        try:
            handler = handlers.get(item.queue)
            if handler is None:
                raise LookupError(f"no handler registered for queue {item.queue} in the worker process")
            returned = handler.fn(item, ctx)
            if returned is not None and inspect.isawaitable(returned):
                from asgiref.sync import async_to_sync

                async def wait():
                    return await returned

                async_to_sync(wait)()
        except BaseException as exc:
            error = _encode(exc)
        finally:
            self.ctx = None
        drop_if_broken(using)
        self.send(("done", error, ctx.settled, _rss_mb()))


# -- the parent ------------------------------------------------------------------------------


class Slot:
    """One child process and the parent thread that feeds it, one run at a time."""

    def __init__(self, pool: ProcessRunnerPool, index: int):
        self.pool = pool
        self.index = index
        self.proc: Any = None
        self.conn: Any = None
        self.pid: int | None = None
        self.tasks = 0
        self.current: Hold | None = None
        self.kill_requested = threading.Event()
        self.thread = threading.Thread(target=self.loop, name=f"workqueue-child-{index}", daemon=True)

    # the child's life

    def spawn(self) -> None:
        mp = multiprocessing.get_context("spawn")
        parent_end, child_end = mp.Pipe()
        self.proc = mp.Process(
            target=child_main,
            args=(child_end, os.environ.get("DJANGO_SETTINGS_MODULE")),
            name=f"workqueue-child-{self.index}",
            daemon=True,
        )
        self.proc.start()
        child_end.close()
        self.conn = parent_end
        self.tasks = 0
        self.kill_requested.clear()
        deadline = time.monotonic() + READY_TIMEOUT
        while not self.conn.poll(POLL):
            if not self.proc.is_alive() or time.monotonic() > deadline:
                code = self.proc.exitcode
                self.kill()
                raise ChildDied(f"a worker process did not start (exit code {code})")
        message = self.conn.recv()
        self.pid = message[1]
        log.info("worker process %d started (pid %d)", self.index, self.pid)

    def kill(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
        if self.proc is not None:
            self.proc.join(10)
        if self.conn is not None:
            self.conn.close()
        self.proc = self.conn = None
        self.pid = None

    def retire(self) -> None:
        """Ask the child to exit after its run (memory, max tasks, shutdown); kill it if it will not."""
        if self.proc is None:
            return
        try:
            self.conn.send(("exit",))
        except (OSError, ValueError):
            pass
        self.proc.join(10)
        self.kill()

    def replace(self, reason: str) -> None:
        """End this child and start its replacement (or, failing that, at the next run)."""
        log.info("worker process %d (pid %s) replaced: %s", self.index, self.pid, reason)
        metrics.child_replaced(reason)
        self.pool.replaced += 1
        if reason in ("memory", "max_tasks"):
            self.retire()
        else:
            self.kill()
        try:
            self.spawn()
        except Exception:
            log.exception("worker process %d: its replacement did not start; trying again at the next run", self.index)

    # the runs

    def loop(self) -> None:
        # The child is started when the first run arrives: a worker whose process-pool queues
        # are idle (every plain runworker serves them) starts no process at all.
        try:
            while True:
                hold = self.pool.queue.get()
                if hold is None:
                    return
                try:
                    if self.proc is None or not self.proc.is_alive():
                        self.spawn()
                    self.run_one(hold)
                except BaseException:
                    self.pool.runs.crashed(hold)
                    self.kill()
        finally:
            self.retire()

    def _abandon(self, hold: Hold) -> None:
        """The watchdog gave ``hold``'s run up (its timeout): kill the child, if it still runs it."""
        if self.current is hold:
            self.kill_requested.set()

    def run_one(self, hold: Hold) -> None:
        runs = self.pool.runs
        self.current = hold
        self.kill_requested.clear()
        started = runs.begin(hold, on_abandon=lambda: self._abandon(hold))
        if started is None:
            return
        handler, ctx = started
        traced = tracing.start_run(hold.item, runs.worker_id)
        try:
            ending = self.exchange(hold, ctx)
        except ChildDied as died:
            self.pool.limits.pop(hold, None)
            if self.kill_requested.is_set():
                # The watchdog gave the item up already; the run ended with its child.
                runs.watchdog.unwatch(hold)
                self.replace("timeout")
                tracing.end_run(traced, "timeout", died)
                return
            runs.give_up(hold, died, died=True)  # only its attempt: retried or failed as they say
            self.replace("died")
            tracing.end_run(traced, "died", died)
            return
        if ending.settled:
            ctx.settled = True
        self.tasks += 1
        limit = self.pool.memory_limit(handler, hold)
        outcome = runs.end(hold, ctx, ending.exc)
        tracing.end_run(traced, outcome, ending.exc)
        if limit is not None and ending.rss_mb > limit:
            log.warning("worker process %d uses %.0f MB, over its %g MB", self.index, ending.rss_mb, limit)
            self.replace("memory")
        elif self.pool.max_tasks and self.tasks >= self.pool.max_tasks:
            self.replace("max_tasks")

    def exchange(self, hold: Hold, ctx) -> Ending:
        """Send the run to the child and wait for its end, passing stops and limits along."""
        runs = self.pool.runs
        self.conn.send(("run", hold.item, runs.worker_id, runs.using))
        stop_sent = False
        while True:
            if self.kill_requested.is_set():
                raise ChildDied("the run passed its timeout; its worker process was killed")
            try:
                ready = self.conn.poll(POLL)
            except (EOFError, OSError):
                ready = False
            if ready:
                try:
                    message = self.conn.recv()
                except (EOFError, OSError):
                    message = None
                if message is not None and message[0] == "done":
                    _, error, settled, rss = message
                    return Ending(_decode(error), settled, rss)
                if message is not None and message[0] == "limits":
                    self.pool.limits[hold] = message[1]
                    runs.limit(hold, ctx, lambda: self._abandon(hold), **message[1])
                    continue
            if not self.proc.is_alive():
                raise ChildDied(f"worker process died (exit code {self.proc.exitcode}) while running it")
            if not stop_sent and hold.cancelled.is_set():
                stop_sent = True
                self.conn.send(("stop", str(hold.reason or "shutdown")))


class ProcessRunnerPool(HoldQueue):
    """``processes`` child processes, each running one sync handler at a time, in claim order."""

    def __init__(self, runs: Runs, processes: int, *, max_tasks_per_child: int | None = None, max_memory_mb=None):
        super().__init__()
        self.runs = runs
        self.processes = processes
        self.max_tasks = max_tasks_per_child
        self.max_memory_mb = max_memory_mb
        self.slots = [Slot(self, n) for n in range(processes)]
        self.limits: dict = {}  # limits a run set from the child (an operation kind's), by hold
        self.replaced = 0
        #: A run its timeout gave up has its child killed: no runner is ever left to it.
        self.abandoned = 0

    def memory_limit(self, handler, hold: Hold) -> float | None:
        own = self.limits.pop(hold, {}).get("max_memory_mb")
        if own is not None:
            return own
        if handler.limits is not None and handler.limits.max_memory_mb is not None:
            return handler.limits.max_memory_mb
        return self.max_memory_mb

    def start(self) -> None:
        for slot in self.slots:
            slot.thread.start()

    def stop(self, timeout: float) -> None:
        for _ in self.slots:
            self.queue.put(None)
        for slot in self.slots:
            slot.thread.join(timeout)

    def children(self) -> list[int]:
        """The children's pids now (the Workers page shows them)."""
        return [slot.pid for slot in self.slots if slot.pid is not None]


class RoutingPool:
    """Threads for most sync queues, the process pool for the queues that ask for it."""

    def __init__(self, threads, processes: ProcessRunnerPool, process_queues: set[str]):
        self.threads = threads
        self.processes = processes
        self.process_queues = process_queues

    def start(self) -> None:
        self.threads.start()
        self.processes.start()

    def submit(self, holds: list[Hold]) -> None:
        mine = [h for h in holds if h.item.queue in self.process_queues]
        if mine:
            self.processes.submit(mine)
            holds = [h for h in holds if h.item.queue not in self.process_queues]
        if holds:
            self.threads.submit(holds)

    def take_waiting(self) -> list[Hold]:
        return [*self.threads.take_waiting(), *self.processes.take_waiting()]

    @property
    def abandoned(self) -> int:
        """Threads left to a run its timeout gave up (a child is killed instead)."""
        return self.threads.abandoned

    def stop(self, timeout: float) -> None:
        self.threads.stop(timeout)
        self.processes.stop(timeout)
