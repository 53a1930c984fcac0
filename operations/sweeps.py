"""Where operations plug into the workqueue: the items-moved hook and the cron sweeps.

``workqueue`` never imports ``operations``; this module registers with its hook registry
(from ``OperationsConfig.ready()``).
"""

from __future__ import annotations

from django.db import DEFAULT_DB_ALIAS

from operations import batches, deps, service, store
from operations.conf import ops_settings
from workqueue.hooks import MoveReason

# How a queue rule's settlement of a work item settles its operation (op_stop_reason reads
# the hard_timeout code as a run's stop reason: keep them in step).
_SETTLE = {
    MoveReason.ATTEMPTS_EXHAUSTED: (
        "failed",
        "attempts_exhausted",
        "the operation's attempts were spent on lapsed leases",
    ),
    MoveReason.HARD_TIMEOUT: ("failed", "hard_timeout", "the attempt ran past its queue's hard_timeout"),
    MoveReason.CANCELLED: ("cancelled", "", ""),
    MoveReason.FORCE_STOPPED: ("cancelled", "cancelled", "force-stopped by an operator"),
    MoveReason.TIMED_OUT: ("failed", "timeout", "the run passed its timeout and was ended by its worker"),
    MoveReason.RUNNER_DIED: ("failed", "attempts_exhausted", "internal: the worker process running it died"),
}


def on_items_moved(items, reason: MoveReason, *, using: str = DEFAULT_DB_ALIAS) -> None:
    """Mirror what happened to operations' work items (settled, requeued, released) onto their operations."""
    conf = ops_settings()
    ours = [item for item in items if conf.serves(item.queue)]
    if not ours:
        return
    ids = [item.key for item in ours]
    if reason in _SETTLE:
        state, code, message = _SETTLE[reason]
        ended = store.settle_from_queue(ids, state=state, error_code=code, error_message=message, using=using)
        deps.ended(ended, using=using)
    elif reason in (MoveReason.REQUEUED, MoveReason.TIMED_OUT_RETRYING, MoveReason.RUNNER_DIED_RETRYING):
        # The item goes round again: the next begin takes the operation at once (a new attempt).
        store.expire_lease(ids, using=using)
    elif reason == MoveReason.RELEASED:
        store.release_held(ids, [item.lease_token for item in ours], using=using)


def recover_sweep(*, using: str = DEFAULT_DB_ALIAS, dry_run: bool = False) -> dict[str, int]:
    # Stranded operations, then children whose end was never counted on their batch or chain,
    # then ended operations whose dependents were never decided.
    return {
        **service.recover(using=using, dry_run=dry_run),
        **batches.recover(using=using, dry_run=dry_run),
        **deps.recover(using=using, dry_run=dry_run),
    }


def reap_sweep(*, using: str = DEFAULT_DB_ALIAS, dry_run: bool = False) -> dict[str, int]:
    return service.reap(using=using, dry_run=dry_run)
