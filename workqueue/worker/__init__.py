"""The worker ``manage.py runworker`` hosts: a claim loop feeding a runner pool.

One process, in parts (each module reads on its own):

- ``claim_loop``: the main thread. Claims batches in short transactions and hands them to the
  runner pool; a pass that filled its batch goes straight round, otherwise it waits for
  "notified, or capacity freed, or poll interval, or stop". Rides out database outages.
- ``runners``: the runner pool (``concurrency`` threads) that calls the handlers, behind the
  small ``RunnerPool`` interface; beside it, ``workqueue.worker.pools.eventloop.AsyncRunnerPool``, one event loop
  awaiting ``async def`` handlers (up to ``async_concurrency`` at once), claimed for separately.
- ``outcome``: ``outcome_of(exc)``, the one table from a handler's ending to what happens to
  its item (complete, retry, fail, release, lost). Pure.
- ``settler``: records endings; completes finished items in batches on its own thread.
- ``shutdown``: the first SIGTERM/SIGINT stops claiming, lets running items finish within the
  grace period, then releases the rest back to queued and exits 0; a second exits at once.
- ``ledger``: what the worker holds (one ``Hold`` per claim) and its counters, behind one lock.
- ``context``: the ``Context`` a handler gets beside its item.

Beside them run the lease keeper (``workqueue.worker.lease``), which renews what is held, and the
process's shared LISTEN connection (``workqueue.listener``), which wakes the claim loop.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Each public name and the module it lives in, imported on first use (PEP 562), so that
#: ``workqueue.handlers`` may import a pool's helpers without pulling the whole worker in.
_NAMES = {
    "Action": "workqueue.worker.outcome",
    "Ending": "workqueue.worker.outcome",
    "failure_of": "workqueue.worker.outcome",
    "outcome_of": "workqueue.worker.outcome",
    "Context": "workqueue.worker.context",
    "RunnerPool": "workqueue.worker.pools.base",
    "Worker": "workqueue.worker.process",
    "WorkerOptions": "workqueue.worker.process",
    "default_worker_id": "workqueue.worker.process",
    "run_worker": "workqueue.worker.process",
}

__all__ = [
    "Action",
    "Context",
    "Ending",
    "RunnerPool",
    "Worker",
    "WorkerOptions",
    "default_worker_id",
    "failure_of",
    "outcome_of",
    "run_worker",
]

if TYPE_CHECKING:
    from workqueue.worker.context import Context
    from workqueue.worker.outcome import Action, Ending, failure_of, outcome_of
    from workqueue.worker.pools.base import RunnerPool
    from workqueue.worker.process import Worker, WorkerOptions, default_worker_id, run_worker


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        raise AttributeError(f"module 'workqueue.worker' has no attribute {name!r}")
    value = getattr(importlib.import_module(_NAMES[name]), name)
    globals()[name] = value
    return value
