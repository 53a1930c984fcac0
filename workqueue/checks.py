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


#: The oldest PostgreSQL the statements run on (the README's requirement).
MIN_POSTGRES = (13, 0)


def _aliases() -> list[str]:
    """The database aliases the app's tables and statements use."""
    return ["default"]


@checks.register("workqueue")
def check_database_engine(app_configs=None, **kwargs):
    """Refuse a database that is not PostgreSQL before a migration runs into its first
    PostgreSQL-only statement (this check needs no connection)."""
    from django.conf import settings

    errors = []
    for alias in _aliases():
        engine = settings.DATABASES.get(alias, {}).get("ENGINE", "")
        if engine.rsplit(".", 1)[-1] not in ("postgresql", "postgis") and "postgres" not in engine:
            errors.append(
                checks.Error(
                    f"DATABASES[{alias!r}] uses {engine or 'no ENGINE'}; PostgreSQL ≥ {MIN_POSTGRES[0]} "
                    "required: workqueue and operations run on SKIP LOCKED, LISTEN/NOTIFY and PL/pgSQL.",
                    hint=f"Point DATABASES[{alias!r}] at a PostgreSQL server "
                    "(ENGINE 'django.db.backends.postgresql', with psycopg 3 installed).",
                    id="workqueue.E003",
                )
            )
    return errors


@checks.register("workqueue", checks.Tags.database)
def check_database_version(app_configs=None, databases=None, **kwargs):
    """Refuse a PostgreSQL older than MIN_POSTGRES (run by ``migrate`` and ``check --database``;
    a server that cannot be reached is not this check's to report)."""
    from django.db import connections

    errors = []
    for alias in _aliases():
        if not databases or alias not in databases or connections[alias].vendor != "postgresql":
            continue
        try:
            version = connections[alias].pg_version  # type: ignore[attr-defined]  # e.g. 150019 for 15.19
        except Exception:
            continue
        major, minor = version // 10000, version % 10000
        if (major, minor) < MIN_POSTGRES:
            errors.append(
                checks.Error(
                    f"DATABASES[{alias!r}] is PostgreSQL {major}.{minor}; PostgreSQL ≥ {MIN_POSTGRES[0]} "
                    "required by workqueue and operations.",
                    hint="Upgrade the server (every supported PostgreSQL release is 13 or newer).",
                    id="workqueue.E004",
                )
            )
    return errors
