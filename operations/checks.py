"""System checks: ``manage.py check`` names a bad OPERATIONS value and says how to fix it."""

from __future__ import annotations

from django.core import checks

from operations.exceptions import OperationsSettingsError


@checks.register("operations")
def check_settings(app_configs=None, **kwargs):
    from django.conf import settings

    from operations.conf import OperationsSettings, configured_table

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
    errors = []
    if conf.table != configured_table():
        errors.append(
            checks.Error(
                "OPERATIONS['TABLE_PREFIX'] changed after the models were loaded.",
                hint="Set it once in settings before Django starts; the table name is fixed at import time.",
                id="operations.E002",
            )
        )
    from workqueue.conf import wq_settings
    from workqueue.exceptions import WorkqueueSettingsError

    try:
        wq = wq_settings()
    except WorkqueueSettingsError:
        return errors  # workqueue.E001 names the bad WORKQUEUE value
    for queue in conf.queues:
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
