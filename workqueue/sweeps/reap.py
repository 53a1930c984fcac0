"""``reap``: delete what is finished and fail what overstayed. Each step is bounded."""

from __future__ import annotations

from django.db import DEFAULT_DB_ALIAS, transaction

from workqueue import handlers, hooks, stats, store
from workqueue.conf import QueueSettings, wq_settings
from workqueue.items import Item


def _known_queues() -> list[QueueSettings]:
    conf = wq_settings()
    names = {q.name for q in conf.known_queues()} | set(conf._extra) | set(handlers.queues())
    return [conf.queue(n) for n in sorted(names)]


def fail_hard_timeouts(*, using: str = DEFAULT_DB_ALIAS, now=None, limit: int | None = None) -> int:
    """Fail held items that ran past their queue's hard_timeout (queues with one set)."""
    timed = [q for q in _known_queues() if q.hard_timeout is not None]
    if not timed:
        return 0
    # One transaction, so the hooks settle what mirrors these items (operations) atomically
    # with them, holding the items' row locks first (the lock order).
    with transaction.atomic(using=using, savepoint=False):
        items = [
            Item.from_row(r)
            for r in store.item_fail_hard_timeout(
                queues=[q.name for q in timed],
                timeouts=[q.hard_timeout for q in timed],
                now=now,
                limit=limit or wq_settings().reap_batch,
                using=using,
            )
        ]
        hooks.items_moved(items, hooks.MoveReason.HARD_TIMEOUT)
    return len(items)


def delete_stopped(*, using: str = DEFAULT_DB_ALIAS, now=None, limit: int | None = None) -> int:
    """Delete stopped items older than their queue's retention."""
    queues = _known_queues()
    default = wq_settings().queue_defaults.retention
    return store.item_reap_stopped(
        queues=[q.name for q in queues],
        retentions=[q.retention for q in queues],
        default_retention=default,
        # No row is past retention before the shortest retention of all: the index bound.
        min_retention=min([default, *(q.retention for q in queues)]),
        now=now,
        limit=limit or wq_settings().reap_batch,
        using=using,
    )


def prune_pollers(*, using: str = DEFAULT_DB_ALIAS, now=None) -> int:
    return store.poller_prune(now=now, window=wq_settings().polling_window, using=using)


def forget_workers(*, using: str = DEFAULT_DB_ALIAS, now=None) -> int:
    return store.worker_forget_stale(now=now, older_than=wq_settings().worker_forget_after, using=using)


def prune_maintenance_runs(*, using: str = DEFAULT_DB_ALIAS, now=None) -> int:
    """Forget recover/reap run records older than 30 days."""
    return store.maintenance_runs_prune(now=now, older_than=30 * 86400.0, using=using)


#: The rate limiter's window is at most an hour ("N/h"); older starts can never count again.
STARTS_KEPT = 3600.0


def prune_starts(*, using: str = DEFAULT_DB_ALIAS, now=None) -> int:
    """Forget rate-limiter starts older than the longest period (the claim prunes its own
    queue's window as it goes; this catches queues whose rate was removed)."""
    return store.queue_starts_prune(now=now, older_than=STARTS_KEPT, using=using)


def reap(*, using: str = DEFAULT_DB_ALIAS, now=None) -> dict[str, int]:
    """Run every workqueue reaping step once; return counts."""
    return {
        # Before the deletes: a queue whose retention is shorter than cron's interval is counted.
        "rolled_up": stats.rollup(using=using, now=now),
        "stats_pruned": stats.prune(using=using, now=now),
        "timed_out": fail_hard_timeouts(using=using, now=now),
        "deleted": delete_stopped(using=using, now=now),
        "pollers_pruned": prune_pollers(using=using, now=now),
        "workers_forgotten": forget_workers(using=using, now=now),
        "runs_pruned": prune_maintenance_runs(using=using, now=now),
        "starts_pruned": prune_starts(using=using, now=now),
    }
