"""Helpers for testing code that uses the queue (and for this project's own tests).

    from workqueue import testing

    def test_signup_sends_the_welcome_email(db):
        signup("ada@example.com")
        testing.assert_enqueued("emails", key="welcome:ada@example.com")
        assert testing.drain(["emails"]) == 1      # runs the handler here, now

``drain`` runs handlers inline, in the calling thread and its transaction (no runworker, no
threads, no leases renewed), settling items exactly as a worker would. An ``async def``
handler is awaited there (``async_to_sync``), its ORM calls back on the calling thread.

``WorkItemFactory``, ``ScheduleFactory`` and ``EnvironmentFactory`` (``workqueue.factories``)
are factory-boy factories that write rows through the app's own statements; they need the
``testing`` extra and are imported only when one is asked for, so a site without factory-boy
pays nothing for this module::

    from workqueue.testing import WorkItemFactory

    def test_the_dashboard_counts_a_lapsed_item(admin_client):
        WorkItemFactory(queue="emails", lapsed=True)
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from asgiref.sync import async_to_sync
from django.db import DEFAULT_DB_ALIAS, connections

from workqueue import handlers as registry
from workqueue import store
from workqueue.exceptions import LeaseLost
from workqueue.models import WorkItem
from workqueue.worker import Context, failure_of

FACTORIES = ("WorkItemFactory", "ScheduleFactory", "EnvironmentFactory")


def __getattr__(name: str) -> Any:
    if name in FACTORIES:
        from workqueue import factories  # raises ImportError naming the extra without factory-boy

        return getattr(factories, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def drain(queues: Iterable[str] | None = None, *, limit: int = 10_000, using: str = DEFAULT_DB_ALIAS) -> int:
    """Run every ready item of ``queues`` (default: every queue with a handler, and every queue
    of a registered queue family that holds items); return how many ran.

    Items a handler retries come back only when their backoff has passed, so a drain ends.
    """
    queues = sorted(queues or _every_queue(using))
    manager = WorkItem.objects.db_manager(using)
    ran = 0
    while ran < limit:
        items = manager.claim(queues, limit=min(100, limit - ran), worker_id="testing.drain").items
        if not items:
            return ran
        for item in items:
            handler = registry.get(item.queue)
            if handler is None:
                raise LookupError(f"no handler registered for queue {item.queue!r}")
            ctx = Context(item, None, "testing.drain", using)
            try:
                returned = handler.fn(item, ctx)
                if inspect.isawaitable(returned):
                    # An async handler (or an async operation/task): awaited here, its
                    # thread-sensitive calls (the ORM's async methods) back on this thread.
                    async_to_sync(_await)(returned)
            except LeaseLost:
                pass
            except Exception as exc:
                if not ctx.settled:
                    manager.fail(item, *failure_of(exc))
            else:
                if not ctx.settled:
                    try:
                        manager.complete(item)
                    except LeaseLost:
                        pass  # the handler settled it in a transaction whose on_commit has not run
            ran += 1
    return ran


def _every_queue(using: str) -> list[str]:
    """Every queue with a handler, and the queues of registered families that hold items."""
    names = set(registry.queues())
    if prefixes := registry.families():
        names.update(name for (name,) in store.queue_names_in_families(prefixes=prefixes, using=using))
    return sorted(names)


async def _await(awaitable):
    return await awaitable


def assert_enqueued(queue: str, key: str | None = None, *, using: str = DEFAULT_DB_ALIAS) -> WorkItem:
    """Assert a live item exists on ``queue`` (for ``key``, when given) and return it."""
    items = WorkItem.objects.using(using).live().filter(queue=queue)
    if key is not None:
        items = items.filter(key=key)
    found = items.order_by("-id").first()
    if found is None:
        live = list(WorkItem.objects.using(using).live().values_list("queue", "key")[:20])
        raise AssertionError(f"nothing live on {queue!r}{f' for {key!r}' if key else ''}; live items: {live}")
    return found


def database_url(using: str = DEFAULT_DB_ALIAS) -> str:
    """A DATABASE_URL naming the database this process uses (the test database, in tests),
    for handing to subprocesses such as runworker."""
    s = connections[using].settings_dict
    user = quote(s.get("USER") or "postgres")
    password = f":{quote(s['PASSWORD'])}" if s.get("PASSWORD") else ""
    host = s.get("HOST") or (s.get("OPTIONS") or {}).get("host") or ""
    if not host or host.startswith("/"):
        return f"postgres://{user}{password}@/{s['NAME']}?host={quote(host or '/var/run/postgresql')}"
    return f"postgres://{user}{password}@{host}:{s.get('PORT') or 5432}/{s['NAME']}"
