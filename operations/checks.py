"""System checks: ``manage.py check`` names a bad OPERATIONS value and says how to fix it."""

from __future__ import annotations

from django.core import checks

from operations.exceptions import OperationsSettingsError

# Per-queue WORKQUEUE keys an operations queue does not use: begin moves the item's lease to
# OPERATIONS["LEASE"], and retries follow the kind's delay_after and max_attempts.
OPS_OWN_KEYS = frozenset({"lease", "retry_delay", "retry_backoff", "max_retry_delay", "max_attempts"})


@checks.register("operations")
def check_settings(app_configs=None, **kwargs):
    from django.conf import settings

    from operations.conf import OperationsSettings

    try:
        conf = OperationsSettings(getattr(settings, "OPERATIONS", None))
    except OperationsSettingsError as exc:
        return [
            checks.Error(
                str(exc),
                hint="Fix the OPERATIONS setting; keys and defaults are in operations/conf.py and the README.",
                id="operations.E001",
            )
        ]
    from operations.models import Operation

    errors: list[checks.CheckMessage] = []
    if conf.table != Operation._meta.db_table:
        errors.append(
            checks.Error(
                "OPERATIONS['TABLE_PREFIX'] changed after the models were loaded.",
                hint="Set it once in settings before Django starts; the table name is fixed at import time.",
                id="operations.E002",
            )
        )
    if conf.watch_max_per_owner > conf.watch_max_threads:
        errors.append(
            checks.Warning(
                f"OPERATIONS['WATCH_MAX_PER_OWNER'] ({conf.watch_max_per_owner}) is more than "
                f"OPERATIONS['WATCH_MAX_THREADS'] ({conf.watch_max_threads}): under WSGI one user can hold every "
                "watch stream the process allows.",
                hint="Keep WATCH_MAX_PER_OWNER at or below WATCH_MAX_THREADS, and WATCH_MAX_THREADS well below "
                "your server's threads (gunicorn --threads).",
                id="operations.W002",
            )
        )
    from workqueue.conf import wq_settings
    from workqueue.exceptions import WorkqueueSettingsError

    try:
        wq = wq_settings()
    except WorkqueueSettingsError:
        return errors  # workqueue.E001 names the bad WORKQUEUE value
    site_queues = (getattr(settings, "WORKQUEUE", None) or {}).get("QUEUES") or {}
    for queue in conf.queues:
        ignored = sorted(OPS_OWN_KEYS.intersection(site_queues.get(queue) or {}))
        if ignored:
            errors.append(
                checks.Warning(
                    f"WORKQUEUE['QUEUES'][{queue!r}] sets {', '.join(ignored)}, but operations on that queue take "
                    "their lease, retry delay and attempts from OPERATIONS (and the kind).",
                    hint="Set OPERATIONS['LEASE'], ['RETRY_DELAY'], ['MAX_ATTEMPTS'] (or a kind's max_attempts) "
                    "instead, and drop those keys from the queue's entry.",
                    id="operations.W001",
                )
            )
        qconf = wq.queue(queue)
        if qconf.over_wire:
            errors.append(
                checks.Error(
                    f"queue {queue!r} runs operations but is set over_wire in WORKQUEUE.",
                    hint="Operations run in-process under runworker; give them a queue that is not served over HTTP.",
                    id="operations.E003",
                )
            )
    return errors
