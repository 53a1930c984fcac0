"""Where operations plug into the workqueue: the settled-item hook and the cron sweeps.

``workqueue`` never imports ``operations``; this module registers with its hook registry
(from ``OperationsConfig.ready()``).
"""

from __future__ import annotations

from django.db import DEFAULT_DB_ALIAS

from operations import batches, service, store
from operations.conf import ops_settings

# How a queue rule's settlement of a work item settles its operation.
_SETTLE = {
    "attempts_exhausted": ("failed", "attempts_exhausted", "the operation's attempts were spent on lapsed leases"),
    "hard_timeout": ("failed", "hard_timeout", "the attempt ran past its queue's hard_timeout"),
    "cancelled": ("cancelled", "", ""),
    "force_stopped": ("cancelled", "cancelled", "force-stopped by an operator"),
}


def on_settled(items, reason: str, *, using: str = DEFAULT_DB_ALIAS) -> None:
    """Mirror a queue rule's settlement of operations work items onto the operation rows."""
    queues = set(ops_settings().queues)
    ours = [item for item in items if item.queue in queues]
    if not ours:
        return
    ids = [item.key for item in ours]
    if reason in _SETTLE:
        state, code, message = _SETTLE[reason]
        ended = store.run(
            "op_settle_from_queue",
            {"ids": ids, "state": state, "error_code": code, "error_message": message},
            using=using,
        )
        batches.fan_in([row[0] for row in ended], using=using)
    elif reason == "requeued":
        store.run("op_expire_lease", {"ids": ids}, using=using)
    elif reason == "released":
        store.run("op_release_held", {"ids": ids, "tokens": [item.lease_token for item in ours]}, using=using)


def recover_sweep(*, using: str = DEFAULT_DB_ALIAS, dry_run: bool = False) -> dict[str, int]:
    # Stranded operations, then children whose end was never counted on their batch or chain.
    return {**service.recover(using=using, dry_run=dry_run), **batches.recover(using=using, dry_run=dry_run)}


def reap_sweep(*, using: str = DEFAULT_DB_ALIAS, dry_run: bool = False) -> dict[str, int]:
    return service.reap(using=using, dry_run=dry_run)
