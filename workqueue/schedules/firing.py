"""Firing: each due slot enqueued once, fleet-wide, with the schedule's advance in one transaction."""

from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import dataclass, field

from django.db import DEFAULT_DB_ALIAS, transaction
from django.db.models.functions import Now

from workqueue import hooks, store
from workqueue.conf import wq_settings
from workqueue.exceptions import InvalidSchedule
from workqueue.schedules.definitions import DEFINITION_FIELDS
from workqueue.schedules.store import db_now, first_slot, get, timing_of
from workqueue.schedules.timing import MICRO, manual_key, slot_key

log = logging.getLogger("workqueue.schedules")


@dataclass
class Fired:
    """One run a schedule enqueued."""

    schedule: str
    slot: dt.datetime | None
    queue: str
    key: str


def _fire_one(row: dict, key: str, using: str) -> tuple[str, str]:
    from workqueue.models import WorkItem

    if row["target"] == "item":
        item, _created = WorkItem.objects.db_manager(using).enqueue(
            row["queue"], key, priority=row["priority"], metadata=row["metadata"] or {}
        )
        return item.queue, item.key
    hook = hooks.schedule_target(row["target"])
    if hook is None:
        raise InvalidSchedule(f"{row['target']} schedules need the operations app in INSTALLED_APPS")
    return hook[0](row, key, using=using)


def run_now(name: str, *, using: str = DEFAULT_DB_ALIAS) -> Fired:
    """Enqueue one extra run now, keyed ``{name}:manual:{timestamp}``; no slot is consumed."""
    from django.db.models import F

    from workqueue.models import Schedule

    with transaction.atomic(using=using):
        schedule = get(name, using)
        now = db_now(using)
        row = {f: getattr(schedule, f) for f in ("name", *DEFINITION_FIELDS)}
        queue, key = _fire_one(row, manual_key(name, now, schedule.key_prefix), using)
        Schedule.objects.using(using).filter(pk=schedule.pk).update(
            fired=F("fired") + 1, last_fired_at=now, last_queue=queue, last_key=key, updated_at=Now()
        )
    return Fired(name, None, queue, key)


# -- the settings sync ------------------------------------------------------------------


_TAKEN = ("id", "name", *DEFINITION_FIELDS, "last_slot", "next_slot", "now")


@dataclass
class PassResult:
    """What one firing pass did."""

    fired: list[Fired] = field(default_factory=list)
    schedules: int = 0
    errors: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "schedules": self.schedules,
            "fired": len(self.fired),
            "keys": [f.key for f in self.fired],
            "errors": self.errors,
        }


def _taken(r: tuple) -> dict:
    row = dict(zip(_TAKEN, r, strict=True))
    for key in ("metadata", "request", "args"):
        if isinstance(row[key], str | bytes):  # Django leaves jsonb undecoded on its connections
            row[key] = json.loads(row[key])
    return row


def due_slots(row: dict, now: dt.datetime, *, catchup: int, grace: float) -> list[dt.datetime]:
    """The slots of a taken schedule to fire at ``now``, under its missed-slot policy."""
    timing = timing_of(row)
    floor = row["next_slot"]
    if row["last_slot"] is not None:
        floor = max(floor, row["last_slot"] + MICRO)
    if row["misfire"] == "all":
        return timing.newest(now, catchup, floor)
    slots = timing.newest(now, 1, floor)
    if row["misfire"] == "skip":
        slots = [s for s in slots if (now - s).total_seconds() <= grace]
    return slots


def fire_batch(
    *, now: dt.datetime | None = None, using: str = DEFAULT_DB_ALIAS, limit: int | None = None
) -> PassResult:
    """One transaction: take up to ``limit`` due schedules, enqueue their slots, advance them."""
    conf = wq_settings()
    result = PassResult()
    with transaction.atomic(using=using):
        rows = [_taken(r) for r in store.schedule_take_due(now=now, limit=limit or conf.schedule_batch, using=using)]
        if not rows:
            return result
        updates: dict[str, list] = {
            k: [] for k in ("ids", "last_slots", "next_slots", "last_queues", "last_keys", "errors", "fired")
        }
        for row in rows:
            at = row["now"]
            timing = timing_of(row)
            fired: list[Fired] = []
            error = ""
            try:
                slots = due_slots(row, at, catchup=conf.schedule_catchup, grace=conf.schedule_grace)
                with transaction.atomic(using=using):
                    for slot in slots:
                        queue, key = _fire_one(row, slot_key(row["name"], slot, row["key_prefix"]), using)
                        fired.append(Fired(row["name"], slot, queue, key))
                next_slot = first_slot(timing, at, slots[-1] if slots else row["last_slot"])
            except Exception as exc:  # one broken schedule must not hold up the others
                log.exception("schedule %r could not fire", row["name"])
                fired = []
                error = f"{exc.__class__.__name__}: {exc}"[:2000]
                result.errors[row["name"]] = error
                try:
                    next_slot = first_slot(timing, at, row["last_slot"])
                except Exception:
                    next_slot = at + dt.timedelta(minutes=1)
            updates["ids"].append(row["id"])
            updates["last_slots"].append(fired[-1].slot if fired else None)
            updates["next_slots"].append(next_slot)
            updates["last_queues"].append(fired[-1].queue if fired else "")
            updates["last_keys"].append(fired[-1].key if fired else "")
            updates["errors"].append(error)
            updates["fired"].append(len(fired))
            result.fired.extend(fired)
        store.schedule_advance_many(**updates, now=now, using=using)
        result.schedules = len(rows)
    return result


def fire_due(*, now: dt.datetime | None = None, using: str = DEFAULT_DB_ALIAS, max_batches: int = 1000) -> PassResult:
    """One pass: fire every due schedule, in slot order, a bounded batch per transaction."""
    total = PassResult()
    limit = wq_settings().schedule_batch
    for _ in range(max_batches):
        batch = fire_batch(now=now, using=using, limit=limit)
        total.fired.extend(batch.fired)
        total.schedules += batch.schedules
        total.errors.update(batch.errors)
        if batch.schedules < limit:
            break
    return total


def seconds_until_due(*, using: str = DEFAULT_DB_ALIAS, now: dt.datetime | None = None) -> float | None:
    """Seconds until the earliest active schedule is due (<= 0: due now; None: none)."""
    rows = store.schedule_next_due(now=now, using=using)
    return rows[0][0] if rows else None
