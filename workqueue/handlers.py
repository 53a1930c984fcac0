"""The queue handler registry ``runworker`` runs: one function per queue.

A handler is ``fn(item, ctx)`` (see ``workqueue.worker.Context``). Register at import time,
typically in your ``AppConfig.ready()``::

    from workqueue import handlers

    @handlers.register("emails")
    def send_email(item, ctx):
        ...

A coroutine function (``async def``) is run on the worker's event loop, up to
``--async-concurrency`` at once, beside the threads that run sync handlers (see
``workqueue.worker.pools.eventloop``)::

    @handlers.register("webhooks")
    async def deliver(item, ctx):
        async with httpx.AsyncClient() as client:
            await client.post(item.metadata["url"], content=item.metadata["body"])

Limits the worker enforces itself, per handler: ``soft_timeout`` (seconds) tells a run to stop
(``ctx.stop_reason == "timeout"``, ``ctx.cancelled`` set; an ``async def`` handler's task is
cancelled); ``timeout`` ends it within a second of the limit — the item is given up (retried
or failed as its attempts say) and the run can no longer settle it: on the process pool its
child is killed and replaced, on a thread the thread is abandoned and another takes its
place. ``pool="processes"`` runs the handler in ``runworker``'s process pool (child processes,
for CPU-bound work), where ``max_memory_mb`` recycles a child that grew past it after its run::

    @handlers.register("thumbnails", pool="processes", soft_timeout=50, timeout=60, max_memory_mb=512)
    def thumbnail(item, ctx): ...

``renews_lease=True`` says the handler keeps its own lease (``operations`` does, through its
progress flushes), so ``runworker`` runs no lease keeper for it.

``register_family(prefix, fn)`` registers one handler for every queue whose name starts with
``prefix`` (the django.tasks backend does, for a backend whose ``QUEUES`` is ``[]``: any queue
name). A queue's own handler wins over a family's; ``runworker`` finds the family's queues in
the table as items arrive (``workqueue.worker.families``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from workqueue.conf import QUEUE_NAME
from workqueue.exceptions import HandlerError
from workqueue.worker.pools.eventloop import is_async


@dataclass(frozen=True, slots=True)
class Handler:
    queue: str
    fn: Callable
    renews_lease: bool = False
    #: A coroutine function: runworker runs it on its event loop, not on a thread.
    is_async: bool = False
    limits: Limits | None = None
    #: "processes": runworker runs it in its process pool; None: on its threads (or its loop).
    pool: str | None = None


POOLS = ("threads", "processes")


@dataclass(frozen=True, slots=True)
class Limits:
    """What the worker enforces on one run: seconds until it is told to stop (``soft_timeout``),
    seconds until it is ended (``timeout``), and the memory past which a child process is
    replaced after its run (``max_memory_mb``, the process pool only)."""

    soft_timeout: float | None = None
    timeout: float | None = None
    max_memory_mb: float | None = None

    @classmethod
    def checked(cls, *, soft_timeout=None, timeout=None, max_memory_mb=None, what: str) -> Limits | None:
        """The limits, each a positive number or None (None when none is set); else HandlerError."""
        values = {"soft_timeout": soft_timeout, "timeout": timeout, "max_memory_mb": max_memory_mb}
        for name, value in values.items():
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or not value > 0):
                raise HandlerError(f"{what}: {name} must be a positive number (seconds, or MB), not {value!r}")
        if soft_timeout is not None and timeout is not None and soft_timeout > timeout:
            raise HandlerError(f"{what}: soft_timeout ({soft_timeout}) must not be past timeout ({timeout})")
        if all(v is None for v in values.values()):
            return None
        return cls(**{k: None if v is None else float(v) for k, v in values.items()})


_registry: dict[str, Handler] = {}
#: Handlers for queue families, by name prefix (a Handler's ``queue`` is the prefix).
_families: dict[str, Handler] = {}


def _pool(pool: str | None, what: str) -> str | None:
    if pool is not None and pool not in POOLS:
        raise HandlerError(f"{what}: pool must be 'threads' or 'processes', not {pool!r}")
    return None if pool == "threads" else pool


def register(
    queue: str,
    fn: Callable | None = None,
    *,
    renews_lease: bool = False,
    soft_timeout: float | None = None,
    timeout: float | None = None,
    max_memory_mb: float | None = None,
    pool: str | None = None,
):
    """Register ``fn`` for ``queue`` (or use as ``@register("queue")``), with its limits."""
    what = f"the handler for queue {queue!r}"
    limits = Limits.checked(soft_timeout=soft_timeout, timeout=timeout, max_memory_mb=max_memory_mb, what=what)
    pool = _pool(pool, what)

    def add(fn: Callable) -> Callable:
        if not isinstance(queue, str) or not QUEUE_NAME.match(queue):
            raise HandlerError(f"bad queue name {queue!r}: use letters, digits, '.', '_', ':' or '-'")
        if not callable(fn):
            raise HandlerError(f"the handler for queue {queue!r} must be callable, not {fn!r}")
        existing = _registry.get(queue)
        if existing is not None and existing.fn is not fn:
            raise HandlerError(
                f"queue {queue!r} already has a handler ({existing.fn.__module__}.{existing.fn.__qualname__}); "
                "one queue has exactly one handler"
            )
        if pool == "processes" and is_async(fn):
            raise HandlerError(f"{what} is async def: it runs on the event loop, not in the process pool")
        _registry[queue] = Handler(queue, fn, renews_lease, is_async(fn), limits, pool)
        return fn

    return add(fn) if fn is not None else add


def register_family(prefix: str, fn: Callable, *, renews_lease: bool = False) -> Callable:
    """Register ``fn`` for every queue named ``prefix`` + anything (one handler per prefix)."""
    if not isinstance(prefix, str) or not prefix or not QUEUE_NAME.match(prefix):
        raise HandlerError(f"bad queue family prefix {prefix!r}: use letters, digits, '.', '_', ':' or '-'")
    if not callable(fn):
        raise HandlerError(f"the handler for queue family {prefix!r}* must be callable, not {fn!r}")
    existing = _families.get(prefix)
    if existing is not None and existing.fn is not fn:
        raise HandlerError(f"queue family {prefix!r}* already has a handler; one family has exactly one handler")
    _families[prefix] = Handler(prefix, fn, renews_lease, is_async(fn))
    return fn


def unregister(queue: str) -> None:
    """Forget the handler for ``queue`` (for tests)."""
    _registry.pop(queue, None)


def unregister_family(prefix: str) -> None:
    """Forget the handler for the queue family ``prefix`` (for tests)."""
    _families.pop(prefix, None)


def get(queue: str) -> Handler | None:
    """The handler for ``queue``: its own, else its family's (the longest prefix that matches)."""
    found = _registry.get(queue)
    if found is None and _families:
        matching = [prefix for prefix in _families if queue.startswith(prefix)]
        if matching:
            found = _families[max(matching, key=len)]
    return found


def families() -> list[str]:
    """Every queue family prefix with a handler, sorted."""
    return sorted(_families)


def queues() -> list[str]:
    """Every queue with a handler, sorted."""
    return sorted(_registry)
