"""System checks: ``manage.py check`` names a bad WORKQUEUE value and says how to fix it."""

from __future__ import annotations

import datetime as dt

from django.core import checks
from django.db import DatabaseError
from django.utils import timezone

from workqueue.exceptions import WorkqueueSettingsError


@checks.register("workqueue")
def check_settings(app_configs=None, **kwargs):
    from django.conf import settings

    from workqueue.conf import WorkqueueSettings, wq_settings

    try:
        WorkqueueSettings(getattr(settings, "WORKQUEUE", None))
        wq_settings()
    except WorkqueueSettingsError as exc:
        return [
            checks.Error(
                str(exc),
                hint="Fix the WORKQUEUE setting; the keys and defaults are listed in workqueue/conf.py and the README.",
                id="workqueue.E001",
            )
        ]
    return []


@checks.register("workqueue", checks.Tags.database)
def check_maintenance(app_configs=None, databases=None, **kwargs):
    """Warn when neither recover nor reap ran lately (cron is missing or failing)."""
    if not databases or "default" not in databases:
        return []
    from workqueue.conf import wq_settings
    from workqueue.models import MaintenanceRun, Worker

    try:
        if not Worker.objects.exists():
            return []  # no worker has ever run here: nothing for the sweeps to tend yet
        warn_after = wq_settings().maintenance_warn_after
        latest = MaintenanceRun.objects.filter(ok=True).order_by("-started_at").values_list("started_at", flat=True)
        last = latest.first()
    except (DatabaseError, WorkqueueSettingsError):
        return []
    if last is None or timezone.now() - last > dt.timedelta(seconds=warn_after):
        when = "never" if last is None else f"last at {last:%Y-%m-%d %H:%M:%S} UTC"
        return [
            checks.Warning(
                f"neither `manage.py recover` nor `manage.py reap` has run in the last "
                f"{warn_after / 60:.0f} minutes ({when}).",
                hint="Schedule both from cron (see the README's crontab) or run "
                "`manage.py runworker --maintenance 60`.",
                id="workqueue.W001",
            )
        ]
    return []


@checks.register("workqueue")
def check_schedules(app_configs=None, **kwargs):
    """Name each bad schedule of WORKQUEUE["SCHEDULES"] (cron, time zone, queue, kind, task)."""
    from workqueue import schedules
    from workqueue.conf import wq_settings
    from workqueue.exceptions import InvalidSchedule

    try:
        entries = wq_settings().schedules
    except WorkqueueSettingsError:
        return []  # workqueue.E001 names it
    errors = []
    for name, raw in entries.items():
        try:
            schedules.from_settings_entry(name, raw)
        except InvalidSchedule as exc:
            hint = "Fix or remove this entry of WORKQUEUE['SCHEDULES'] (see the README's Periodic work)."
            if schedules.CRON_EXTRA in str(exc):
                hint = f"Install the cron extra: {schedules.CRON_EXTRA}, or use an interval (every)."
            errors.append(checks.Error(str(exc), hint=hint, id="workqueue.E002"))
    return errors
