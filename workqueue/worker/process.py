"""The worker process ``manage.py runworker`` hosts: a claim loop feeding its runner pools
(see the package's docstring for its parts)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from dataclasses import dataclass, field

from django.db import DEFAULT_DB_ALIAS, connections

from workqueue import controls
from workqueue import handlers as registry
from workqueue import listener as listener_mod
from workqueue.conf import wq_settings
from workqueue.worker.claim_loop import ClaimLoop
from workqueue.worker.families import Families, split_patterns
from workqueue.worker.lease import LeaseKeeper
from workqueue.worker.ledger import Ledger
from workqueue.worker.loop import Signal
from workqueue.worker.pools.base import RunnerPool, Runs
from workqueue.worker.pools.eventloop import AsyncRunnerPool
from workqueue.worker.pools.threads import ThreadRunnerPool
from workqueue.worker.settler import Settler
from workqueue.worker.shutdown import Shutdown

__all__ = ["Worker", "WorkerOptions", "default_worker_id", "run_worker"]

log = logging.getLogger("workqueue.worker")


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
    pool: str | None = None  # "processes": every sync queue in the process pool
    processes: int | None = None  # the process pool's children (default: the CPU count)
    max_tasks_per_child: int | None = None
    max_memory_mb: float | None = None


class Worker:
    """A claim loop over some queues; ``run()`` blocks until it is told to stop."""

    process_pool = None  # the ProcessRunnerPool, when some queue runs in child processes

    def __init__(self, options: WorkerOptions):
        conf = wq_settings()
        self.options = options
        self.using = options.using
        self.queues, prefixes = _served(options.queues)
        self.worker_id = options.worker_id or default_worker_id()
        self.concurrency = options.concurrency or conf.concurrency
        self.batch = options.batch or conf.batch
        self.poll = options.poll if options.poll is not None else conf.poll_interval
        # Queue families (a django.tasks backend with QUEUES []): their queues join the claim
        # as the worker finds them (workqueue.worker.families says how, and why not a prefix claim).
        self.families = Families(prefixes, using=self.using, every=self.poll)
        self.grace = options.grace if options.grace is not None else conf.shutdown_grace
        # Sync queues whose handlers run in the process pool (workqueue.worker.pools.processes).
        self.process_queues = self._process_queues(options.pool)
        self.processes = (options.processes or os.cpu_count() or 1) if self.process_queues else 0
        sync = [q for q in self.queues if not registry.get(q).is_async]  # type: ignore[union-attr]
        self.runners = self.processes if set(sync) <= set(self.process_queues) else self.concurrency + self.processes
        # Keep up to one batch claimed ahead of the runners, and claim again once half of
        # it has started, so runners never sit idle while a claim is on the wire.
        self.max_inflight = max(self.batch, self.runners) + max(1, self.batch // 2)
        self.refill_at = self.max_inflight - max(1, self.batch // 2)
        # async def handlers run on an event loop (workqueue.worker.pools.eventloop), their
        # queues claimed for separately.
        self.loop_queues = [q for q in self.queues if (h := registry.get(q)) is not None and h.is_async]
        self.async_concurrency = options.async_concurrency or conf.async_concurrency
        # The loop claims again once a quarter of its slots are free: a claim per few items
        # finished would cost more than the items (these runs are short waits, many at once).
        loop_refill_at = self.async_concurrency - max(1, self.async_concurrency // 4)
        self.keeper = LeaseKeeper(using=self.using)
        self.wake = Signal()
        self.ledger = Ledger(
            self.keeper,
            self.wake,
            max_inflight=self.max_inflight,
            refill_at=self.refill_at,
            max_on_loop=self.async_concurrency,
            loop_refill_at=loop_refill_at,
        )
        self.shutdown = Shutdown(grace=self.grace, wake=self.wake)
        self.settler = Settler(self.ledger, using=self.using, batch=self.batch)
        runs = Runs(
            self.ledger,
            self.settler,
            self.keeper,
            draining=self.shutdown.draining,
            worker_id=self.worker_id,
            using=self.using,
        )
        self.pool: RunnerPool = self._sync_pool(runs)
        self._runs = runs
        self._loop_pool: AsyncRunnerPool | None = None
        self._loop_lock = threading.Lock()
        runs.loop = self.loop_pool
        self.claim_loop = ClaimLoop(
            queues=self.queues,
            worker_id=self.worker_id,
            using=self.using,
            poll=self.poll,
            max_items=options.max_items,
            max_seconds=options.max_seconds,
            maintenance=options.maintenance,
            ledger=self.ledger,
            keeper=self.keeper,
            pool=self.pool,
            wake=self.wake,
            stopping=self.shutdown.stopping,
            loop_queues=self.loop_queues,
            loop_pool=self.loop_pool,  # type: ignore[arg-type]
            before_pass=self._find_family_queues if self.families else None,
        )
        self.claim_loop.describe_pool = self.describe_pool
        self._queue_set = set(self.queues)
        self._listen_token: int | None = None

    def _process_queues(self, pool: str | None) -> list[str]:
        """The sync queues this worker runs in its process pool: all of them with ``--pool
        processes``, else those whose handler or queue setting asks for it."""
        conf = wq_settings()
        chosen = []
        for queue in self.queues:
            handler = registry.get(queue)
            if handler is None or handler.is_async:
                continue
            if pool == "processes" or handler.pool == "processes" or (pool is None and conf.queue(queue).pool):
                chosen.append(queue)
        return chosen

    def _sync_pool(self, runs: Runs) -> RunnerPool:
        if not self.process_queues:
            return ThreadRunnerPool(runs, self.concurrency)
        from workqueue.worker.pools.processes import ProcessRunnerPool, RoutingPool

        self.process_pool = ProcessRunnerPool(
            runs,
            self.processes,
            max_tasks_per_child=self.options.max_tasks_per_child,
            max_memory_mb=self.options.max_memory_mb,
        )
        if self.runners == self.processes:
            return self.process_pool
        return RoutingPool(ThreadRunnerPool(runs, self.concurrency), self.process_pool, set(self.process_queues))

    # What it has done so far (read by runworker's summary, tests, the heartbeat).
    @property
    def inflight(self) -> int:
        return self.ledger.inflight

    @property
    def processed(self) -> int:
        return self.ledger.processed

    @property
    def succeeded(self) -> int:
        return self.ledger.succeeded

    @property
    def failed(self) -> int:
        return self.ledger.failed

    @property
    def lost(self) -> int:
        return self.ledger.lost

    @property
    def claims(self) -> int:
        return self.claim_loop.claims

    def describe_pool(self) -> dict:
        """What runs this worker's handlers, for its heartbeat (the Workers page shows it)."""
        described: dict = {}
        if self.runners != self.processes:
            described["threads"] = self.concurrency
        if self.loop_queues or self._loop_pool is not None:
            described["async"] = self.async_concurrency
        if self.process_pool is not None:
            described["processes"] = self.processes
            described["children"] = self.process_pool.children()
            described["replaced"] = self.process_pool.replaced
        if self.pool.abandoned:
            described["abandoned"] = self.pool.abandoned
        if self._runs.watchdog.timeouts:
            described["timeouts"] = self._runs.watchdog.timeouts
        if self._runs.watchdog.limited:
            described["limited"] = self._runs.watchdog.limited
        return described

    def loop_pool(self) -> AsyncRunnerPool:
        """The event-loop pool, started on first use (async queues, or a run handed on to it)."""
        with self._loop_lock:
            if self._loop_pool is None:
                self._loop_pool = AsyncRunnerPool(self._runs, self.async_concurrency)
                self._loop_pool.start()
            return self._loop_pool

    def request_stop(self) -> None:
        """Stop claiming and drain (what the first SIGTERM does)."""
        self.shutdown.request_stop()

    def _on_notify(self, payload: str | None) -> None:
        if payload == controls.CONTROLS_NOTIFY:
            controls.invalidate()  # an operator changed a queue's controls: read them afresh
            self.claim_loop.notified(None)  # a resumed or raised limit: look at every queue again
            self.wake.set()
        elif payload is None or payload in self._queue_set:
            self.claim_loop.notified(payload)
            self.wake.set()
        elif self.families.covers(payload):
            self.families.heard(payload)  # a queue of a family, new to this worker: served from the next pass
            self.wake.set()

    def _find_family_queues(self) -> None:
        """Serve the family queues found since the last pass (the claim loop's thread)."""
        for queue in self.families.new_names(self._queue_set):
            handler = registry.get(queue)
            if handler is None:
                continue
            log.info("worker %s now serving %s (queue family)", self.worker_id, queue)
            self._queue_set.add(queue)
            self.claim_loop.serve(queue, on_loop=handler.is_async)

    def run(self) -> int:
        if self.options.install_signals and threading.current_thread() is threading.main_thread():
            self.shutdown.install_signals()
        listener = listener_mod.shared()
        self._listen_token = listener.subscribe(wq_settings().notify_channel, self._on_notify)
        self.pool.start()
        if self.loop_queues:
            self.loop_pool()
        self.settler.start()
        log.info(
            "worker %s serving %s (concurrency %d%s%s, batch %d, poll %.1fs)",
            self.worker_id,
            ", ".join([*self.queues, *(f"{prefix}*" for prefix in self.families.prefixes)]),
            self.concurrency,
            f", {self.processes} processes for {', '.join(self.process_queues)}" if self.process_queues else "",
            f", async concurrency {self.async_concurrency}" if self.loop_queues else "",
            self.batch,
            self.poll,
        )
        listener.wait_connected(5.0)
        try:
            self.claim_loop.run()
        finally:
            self._stop()
        return 0

    def _stop(self) -> None:
        self.shutdown.stopping.set()
        if self._listen_token is not None:
            listener_mod.shared().unsubscribe(self._listen_token)
        pools = [self.pool] if self._loop_pool is None else [self.pool, self._loop_pool]
        self.shutdown.drain(pools=pools, settler=self.settler, ledger=self.ledger, keeper=self.keeper)  # type: ignore[arg-type]
        self.keeper.close()
        self._runs.watchdog.stop(1.0)
        try:
            self.claim_loop.beat("stopped", force=True)
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


def _served(names: list[str]) -> tuple[list[str], list[str]]:
    """The queues and queue family prefixes a worker serves (``--queue`` values, or every
    queue and family with a handler); a ValueError names what has no handler."""
    if not names:
        queues, prefixes = registry.queues(), registry.families()
    else:
        queues, prefixes = split_patterns(names)
    missing = [q for q in queues if registry.get(q) is None]
    missing += [f"{p}*" for p in prefixes if not any(p.startswith(family) for family in registry.families())]
    if missing:
        known = [*registry.queues(), *(f"{p}*" for p in registry.families())]
        raise ValueError(
            f"no handler registered for queue(s) {', '.join(missing)}; registered: {', '.join(known) or '(none)'}"
        )
    if not queues and not prefixes:
        raise ValueError("no queues to serve: register a handler with workqueue.handlers.register()")
    return sorted(set(queues)), sorted(set(prefixes))


def run_worker(options: WorkerOptions) -> int:
    """Build a Worker and run it; the entry point ``runworker`` calls."""
    return Worker(options).run()
