"""Schedules as rows: add, get, pause, resume, remove, and the sync of WORKQUEUE['SCHEDULES']."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.db import DEFAULT_DB_ALIAS, transaction
from django.db.models.functions import Now

from workqueue import store
from workqueue.conf import wq_settings
from workqueue.exceptions import InvalidSchedule, ScheduleNotFound
from workqueue.schedules.definitions import DEFINITION_FIELDS, TIMING_FIELDS, settings_schedules, validate
from workqueue.schedules.timing import Timing


def timing_of(schedule) -> Timing:
    get = schedule.get if isinstance(schedule, dict) else lambda k: getattr(schedule, k)
    return Timing(cron=get("cron") or "", every=get("every"), timezone=get("timezone") or "UTC")


def first_slot(timing: Timing, now: dt.datetime, last_slot: dt.datetime | None) -> dt.datetime:
    """The next slot to wait for: after ``now`` and after the last slot fired."""
    return timing.next_after(max(now, last_slot) if last_slot else now)


def db_now(using: str = DEFAULT_DB_ALIAS) -> dt.datetime:
    """The database clock (every slot is computed against it)."""
    from django.db import connections

    with connections[using].cursor() as cur:
        cur.execute("SELECT now()")
        return cur.fetchone()[0]


def notify_changed(using: str = DEFAULT_DB_ALIAS) -> None:
    """Wake every scheduler loop at commit: a schedule changed."""
    store.schedule_notify(channel=wq_settings().notify_channel, using=using)


# -- verbs ------------------------------------------------------------------------------


def add(fields: dict, *, using: str = DEFAULT_DB_ALIAS, source: str = "admin", now: dt.datetime | None = None):
    """Create a schedule from a definition (model field names); raise InvalidSchedule if bad."""
    from workqueue.models import Schedule

    clean = validate(fields)
    enabled = clean.pop("enabled", True)
    with transaction.atomic(using=using):
        if Schedule.objects.using(using).filter(name=clean["name"]).exists():
            raise InvalidSchedule(f"schedule {clean['name']!r}: a schedule with this name already exists")
        now = now or db_now(using)
        schedule = Schedule.objects.using(using).create(
            **{k: clean[k] for k in ("name", *DEFINITION_FIELDS)},
            enabled=enabled,
            source=source,
            next_slot=first_slot(timing_of(clean), now, None),
        )
        notify_changed(using)
    return schedule


def get(name: str, using: str = DEFAULT_DB_ALIAS):
    """The schedule called ``name``, or ScheduleNotFound."""
    from workqueue.models import Schedule

    try:
        return Schedule.objects.using(using).get(name=name)
    except Schedule.DoesNotExist:
        raise ScheduleNotFound(name)


def pause(names, *, using: str = DEFAULT_DB_ALIAS) -> int:
    """Stop schedules from firing (they keep their record); return how many changed."""
    from workqueue.models import Schedule

    return (
        Schedule.objects.using(using).filter(name__in=list(names), enabled=True).update(enabled=False, updated_at=Now())
    )


def resume(names, *, using: str = DEFAULT_DB_ALIAS) -> int:
    """Let paused schedules fire again, from their next slot after now (paused slots are skipped)."""
    from workqueue.models import Schedule

    changed = 0
    with transaction.atomic(using=using):
        now = db_now(using)
        for schedule in Schedule.objects.using(using).select_for_update().filter(name__in=list(names), enabled=False):
            schedule.enabled = True
            schedule.next_slot = first_slot(timing_of(schedule), now, schedule.last_slot)
            schedule.updated_at = now
            schedule.save(update_fields=["enabled", "next_slot", "updated_at"])
            changed += 1
        if changed:
            notify_changed(using)
    return changed


def remove(name: str, *, using: str = DEFAULT_DB_ALIAS) -> None:
    """Delete an operator's schedule (a settings schedule is removed by editing settings)."""
    schedule = get(name, using)
    if schedule.source == "settings" and schedule.removed_at is None:
        raise InvalidSchedule(
            f"schedule {name!r} comes from WORKQUEUE['SCHEDULES']: remove it there (or pause it here)"
        )
    schedule.delete()


@dataclass
class SyncResult:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


def sync_settings(*, using: str = DEFAULT_DB_ALIAS, now: dt.datetime | None = None) -> SyncResult:
    """Make ``work_schedules`` match ``WORKQUEUE["SCHEDULES"]``; raise InvalidSchedule if one is bad.

    New schedules are created; changed ones are updated (a changed cron, interval or time zone
    waits for its next slot after now; ``last_slot`` always stays); schedules gone from the
    settings stop firing and show as removed. An operator's pause survives a sync. Nothing
    is written when any schedule is bad.
    """
    from workqueue.models import Schedule

    wanted = settings_schedules()
    result = SyncResult()
    with transaction.atomic(using=using):
        store.schedule_sync_lock(using=using)
        now = now or db_now(using)
        existing = {s.name: s for s in Schedule.objects.using(using).select_for_update()}
        for name, spec in wanted.items():
            current = existing.get(name)
            definition = {k: spec[k] for k in DEFINITION_FIELDS}
            if current is None:
                Schedule.objects.using(using).create(
                    name=name,
                    **definition,
                    enabled=spec["enabled"],
                    source="settings",
                    next_slot=first_slot(timing_of(spec), now, None),
                )
                result.created.append(name)
                continue
            changed = [k for k in DEFINITION_FIELDS if getattr(current, k) != definition[k]]
            returning = current.removed_at is not None or current.source != "settings"
            if not changed and not returning:
                continue
            for k in changed:
                setattr(current, k, definition[k])
            current.updated_at = now
            if returning:
                current.removed_at = None
                current.source = "settings"
                current.enabled = spec["enabled"]
            if returning or any(k in TIMING_FIELDS for k in changed) or current.next_slot is None:
                current.next_slot = first_slot(timing_of(current), now, current.last_slot)
            current.save()
            result.updated.append(name)
        for name, current in existing.items():
            if current.source == "settings" and name not in wanted and current.removed_at is None:
                current.removed_at = current.updated_at = now
                current.enabled = False
                current.save(update_fields=["removed_at", "enabled", "updated_at"])
                result.removed.append(name)
        if result.created or result.updated or result.removed:
            notify_changed(using)
    return result


# -- the firing pass --------------------------------------------------------------------

#: The columns schedule_take_due returns, in its order.
