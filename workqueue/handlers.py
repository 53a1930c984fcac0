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


_registry: dict[str, Handler] = {}
#: Handlers for queue families, by name prefix (a Handler's ``queue`` is the prefix).
_families: dict[str, Handler] = {}


def register(queue: str, fn: Callable | None = None, *, renews_lease: bool = False):
    """Register ``fn`` for ``queue`` (or use as ``@register("queue")``)."""

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
        _registry[queue] = Handler(queue, fn, renews_lease, is_async(fn))
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
