"""``recover``: put back what a crash left half-done. Each step is one bounded statement."""

from __future__ import annotations

from django.db import DEFAULT_DB_ALIAS, transaction

from workqueue import hooks, stats, store
from workqueue.conf import wq_settings
from workqueue.items import Item


def finalize_stopping(*, using: str = DEFAULT_DB_ALIAS, now=None, limit: int | None = None) -> int:
    """Settle stopping items whose lease lapsed: nobody is left to finish winding them down."""
    rows = store.item_finalize_stopping(now=now, limit=limit or wq_settings().recover_batch, using=using)
    return len(rows)


def requeue_lapsed(*, using: str = DEFAULT_DB_ALIAS, now=None, limit: int | None = None) -> tuple[int, int]:
    """Re-offer wire items whose startup or heartbeat lease lapsed; fail those out of attempts.

    Returns (requeued, failed).
    """
    with transaction.atomic(using=using, savepoint=False):  # the hooks settle in the same transaction
        items = [
            Item.from_row(r)
            for r in store.item_requeue_lapsed(now=now, limit=limit or wq_settings().recover_batch, using=using)
        ]
        failed = [i for i in items if i.state == "stopped"]
        hooks.items_moved(failed, hooks.MoveReason.ATTEMPTS_EXHAUSTED)
    return len(items) - len(failed), len(failed)


def recover(*, using: str = DEFAULT_DB_ALIAS, now=None) -> dict[str, int]:
    """Run every workqueue recovery step once; return counts."""
    requeued, exhausted = requeue_lapsed(using=using, now=now)
    return {
        "finalized": finalize_stopping(using=using, now=now),
        "requeued": requeued,
        "exhausted": exhausted,
        # The dashboard's and the charts' rollup of what settled (workqueue.stats).
        "rolled_up": stats.rollup(using=using, now=now),
    }
