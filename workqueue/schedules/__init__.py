"""Schedules: periodic work that fires exactly once per slot across the whole fleet.

There is no leader and no beat process. Every ``runworker`` runs a small scheduler loop
(``workqueue.schedules.loop``) and ``manage.py schedules tick`` runs one pass; any number of them
may run at once. A pass (:func:`fire_due`) is short transactions that each take a bounded
batch of due schedules with ``FOR UPDATE SKIP LOCKED``, enqueue each due slot's work under a
key that is the same for everyone who could fire it (``{name}:{slot UTC ISO}Z``), and advance
``last_slot``/``next_slot`` in the same transaction. A crash before the commit undoes both;
after it, the slot is recorded and never fires again, even once ``reap`` has deleted the
items it made.

Slots: an interval schedule (``every``) fires at the multiples of its interval since the Unix
epoch (every 10 s: at :00, :10, ...), so every process computes the same slots. A cron
schedule (five fields, read by the ``cronsim`` library in the schedule's IANA time zone)
fires at the local times it matches, stored in UTC. Daylight saving follows cron's own rule
(as cronsim implements it): a local time that does not exist (02:30 on a spring-forward
night) fires once at the jump (03:00 local); a local time that happens twice (02:30 on a
fall-back night) fires once, at its first occurrence.

Missed slots (no worker ran for a while), per schedule: ``latest`` (the default) fires the
newest missed slot once; ``all`` fires every missed slot, at most ``SCHEDULE_CATCHUP`` (the
newest ones); ``skip`` fires none, only a slot that is at most ``SCHEDULE_GRACE`` late. In
every case ``next_slot`` ends in the future.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import zoneinfo
from dataclasses import dataclass, field

from django.conf import settings as django_settings
from django.db import DEFAULT_DB_ALIAS, transaction
from django.db.models.functions import Now

from workqueue import handlers, hooks, store, values
from workqueue.conf import QUEUE_NAME, wq_settings
from workqueue.exceptions import InvalidInput, InvalidSchedule, ScheduleNotFound

log = logging.getLogger("workqueue.schedules")

UTC = dt.UTC
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
MICRO = dt.timedelta(microseconds=1)
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
CRON_EXTRA = 'pip install "django-workqueue-operations[cron]"'

#: Keys of a schedule in ``WORKQUEUE["SCHEDULES"]`` and the model field each fills.
SETTINGS_KEYS = {
    "cron": "cron",
    "every": "every",
    "timezone": "timezone",
    "queue": "queue",
    "key": "key_prefix",
    "metadata": "metadata",
    "priority": "priority",
    "operation": "kind",
    "request": "request",
    "task": "task",
    "args": "args",
    "misfire": "misfire",
    "enabled": "enabled",
}
#: The fields that define when a schedule fires: changing one recomputes next_slot.
TIMING_FIELDS = ("cron", "every", "timezone")
#: Every field a definition sets (the rest is the schedule's record).
DEFINITION_FIELDS = (
    "target",
    "queue",
    "key_prefix",
    "metadata",
    "priority",
    "kind",
    "request",
    "task",
    "args",
    "cron",
    "every",
    "timezone",
    "misfire",
)


# -- slots ------------------------------------------------------------------------------


def _cronsim():
    try:
        import cronsim
    except ImportError:
        raise InvalidSchedule(f"cron schedules need the cronsim library: {CRON_EXTRA}")
    return cronsim


def check_cron(expr: object) -> str:
    """Return the expression if cronsim accepts it as five fields; else raise InvalidSchedule."""
    if not isinstance(expr, str) or len(expr.split()) != 5:
        raise InvalidSchedule(
            f"cron expression {expr!r} must have five fields: minute hour day-of-month month day-of-week "
            "(e.g. '30 2 * * *')"
        )
    cronsim = _cronsim()
    try:
        cronsim.CronSim(expr, dt.datetime(2026, 1, 1))
    except cronsim.CronSimError as exc:
        raise InvalidSchedule(f"cron expression {expr!r} is not valid: {exc}")
    return expr


def check_timezone(name: object) -> zoneinfo.ZoneInfo:
    if not isinstance(name, str) or not name:
        raise InvalidSchedule(f"time zone must be an IANA name such as 'Europe/Berlin', not {name!r}")
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise InvalidSchedule(f"unknown time zone {name!r}: use an IANA name such as 'Europe/Berlin' or 'UTC'")


@dataclass(frozen=True)
class Timing:
    """When a schedule fires: a cron expression in a time zone, or a fixed interval."""

    cron: str = ""
    every: float | None = None
    timezone: str = "UTC"

    @property
    def _every_us(self) -> int:
        assert self.every is not None, "only an interval schedule has slots every N seconds"
        return max(1, round(self.every * 1_000_000))

    def _us(self, t: dt.datetime) -> int:
        return (t - EPOCH) // MICRO

    def _cron_iter(self, start: dt.datetime, reverse: bool = False):
        cronsim = _cronsim()
        tz = check_timezone(self.timezone)
        for local in cronsim.CronSim(self.cron, start.astimezone(tz), reverse=reverse):
            yield local.astimezone(UTC)

    def next_after(self, t: dt.datetime) -> dt.datetime:
        """The first slot strictly after ``t``."""
        if self.every:
            step = self._every_us
            return EPOCH + MICRO * ((self._us(t) // step + 1) * step)
        return next(self._cron_iter(t))

    def newest(self, now: dt.datetime, k: int, floor: dt.datetime) -> list[dt.datetime]:
        """Up to ``k`` of the newest slots ``s`` with ``floor <= s <= now``, oldest first."""
        if now < floor or k < 1:
            return []
        if self.every:
            step = self._every_us
            last = self._us(now) // step * step
            out = [EPOCH + MICRO * (last - i * step) for i in range(k)]
            return [s for s in reversed(out) if s >= floor]
        # The forward iteration defines the slots; the reverse one only finds where to start
        # it, a margin earlier so that a daylight-saving shift cannot hide a slot.
        start = floor - dt.timedelta(seconds=1)
        back = self._cron_iter(now + dt.timedelta(seconds=1), reverse=True)
        for n, s in enumerate(back, 1):
            if s < floor:
                break
            if n >= k:
                start = max(start, s - dt.timedelta(hours=3))
                break
        found = []
        for s in self._cron_iter(start):
            if s > now:
                break
            if s >= floor:
                found.append(s)
        return found[-k:]

    def describe(self) -> str:
        if self.every:
            return f"every {_human_seconds(self.every)}"
        return f"cron {self.cron} ({self.timezone})"


def _human_seconds(value: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if value >= size and value % size == 0:
            return f"{int(value // size)} {unit}"
    return f"{value:g} s"


def slot_key(name: str, slot: dt.datetime, prefix: str = "") -> str:
    """The key of a slot's run: ``{prefix}{name}:{slot in UTC ISO 8601}Z`` (SPEC, Wave 2 rules)."""
    return f"{prefix}{name}:{slot.astimezone(UTC).replace(tzinfo=None).isoformat()}Z"


def manual_key(name: str, at: dt.datetime, prefix: str = "") -> str:
    """The key of a run-now: ``{prefix}{name}:manual:{UTC timestamp}Z``."""
    return f"{prefix}{name}:manual:{at.astimezone(UTC).replace(tzinfo=None).isoformat(timespec='microseconds')}Z"


# -- definitions ------------------------------------------------------------------------


#: A schedule's shortest interval; the longest is ``values.MAX_INTERVAL`` (366 days).
MIN_INTERVAL = 0.1


def parse_interval(every: object) -> float:
    """An interval: seconds (a number, a timedelta, or text like ``10``, ``10s``, ``5m``, ``2h``,
    ``1d`` in ASCII digits) from 0.1 s to 366 days (``workqueue.values.seconds``)."""
    what = f"interval {every!r}" if isinstance(every, str) else "interval (every)"
    return values.seconds(every, what=what, minimum=MIN_INTERVAL, maximum=values.MAX_INTERVAL, error=InvalidSchedule)


def validate(fields: dict, *, name: object = None) -> dict:
    """Check a schedule definition (model field names) and return it normalised.

    Raises InvalidSchedule naming the schedule and what to fix; used by the settings sync,
    the system checks, the command and the admin form alike.
    """
    from workqueue.items import validate_metadata

    name = name if name is not None else fields.get("name")
    where = f"schedule {name!r}: "
    try:
        if not isinstance(name, str) or not NAME.match(name):
            raise InvalidSchedule(
                f"bad schedule name {name!r}: use letters, digits, '.', '_' or '-', at most 200 characters"
            )
        out = dict(fields)
        out["name"] = name
        cron, every = out.get("cron") or "", out.get("every")
        if bool(cron) == (every is not None):
            raise InvalidSchedule("give exactly one of a cron expression (cron) or an interval (every)")
        if every is not None:
            out["every"] = parse_interval(every)
            out["cron"] = ""
        else:
            out["cron"] = check_cron(" ".join(str(cron).split()))
            out["every"] = None
        out["timezone"] = out.get("timezone") or django_settings.TIME_ZONE or "UTC"
        check_timezone(out["timezone"])
        misfire = out.get("misfire") or "latest"
        if misfire not in ("latest", "all", "skip"):
            raise InvalidSchedule(f"misfire must be latest, all or skip, not {misfire!r}")
        out["misfire"] = misfire
        out["priority"] = values.priority(out.get("priority", 0), error=InvalidSchedule)
        targets = [t for t, f in (("item", "queue"), ("operation", "kind"), ("task", "task")) if out.get(f)]
        if len(targets) != 1:
            raise InvalidSchedule(
                "give exactly one thing to run: a queue (a work item), an operation kind, or a task's dotted path"
            )
        out["target"] = targets[0]
        if out["target"] == "item":
            queue = out["queue"]
            if not isinstance(queue, str) or not QUEUE_NAME.match(queue):
                raise InvalidSchedule(f"bad queue name {queue!r}")
            if queue not in wq_settings().queues and handlers.get(queue) is None:
                raise InvalidSchedule(
                    f"unknown queue {queue!r}: no handler is registered for it and WORKQUEUE['QUEUES'] does not list it"
                )
            try:
                out["metadata"] = validate_metadata(out.get("metadata") or {})
            except InvalidInput as exc:
                raise InvalidSchedule(str(exc))
            prefix = out.get("key_prefix") or ""
            if not isinstance(prefix, str) or len(prefix) > 200 or not values.storable(prefix):
                raise InvalidSchedule(
                    f"key prefix must be a string of at most 200 characters (UTF-8 text, no NUL), not {prefix!r}"
                )
        else:
            hook = hooks.schedule_target(out["target"])
            if hook is None:
                raise InvalidSchedule(
                    f"{out['target']} schedules need the operations app: add 'operations' to INSTALLED_APPS"
                )
            if out["target"] == "task" and not isinstance(out.get("args") or [], list):
                raise InvalidSchedule(f"task args must be a JSON list, not {out.get('args')!r}")
            problems = hook[1](out)
            if problems:
                raise InvalidSchedule("; ".join(problems))
        for key in ("metadata", "request", "args"):
            try:
                json.dumps(out.get(key), allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise InvalidSchedule(f"{key} must be JSON-serialisable ({exc})")
        out.setdefault("metadata", {})
        out.setdefault("args", [])
        out.setdefault("key_prefix", "")
        out.setdefault("queue", "")
        out.setdefault("kind", "")
        out.setdefault("task", "")
        out.setdefault("request", None)
        out.setdefault("priority", 0)
        return out
    except InvalidSchedule as exc:
        message = str(exc)
        raise InvalidSchedule(message if message.startswith(where) else where + message)


def from_settings_entry(name: object, raw: object) -> dict:
    """Turn one ``WORKQUEUE["SCHEDULES"]`` entry into validated model fields."""
    if not isinstance(raw, dict):
        raise InvalidSchedule(f"schedule {name!r}: must be a dict, not {raw!r}")
    unknown = sorted(set(raw) - set(SETTINGS_KEYS))
    if unknown:
        raise InvalidSchedule(
            f"schedule {name!r}: unknown key(s) {', '.join(map(repr, unknown))}; "
            f"known keys are {', '.join(sorted(SETTINGS_KEYS))}"
        )
    fields = {SETTINGS_KEYS[k]: v for k, v in raw.items()}
    enabled = fields.pop("enabled", True)
    if not isinstance(enabled, bool):
        raise InvalidSchedule(f"schedule {name!r}: enabled must be True or False, not {enabled!r}")
    out = validate(fields, name=name)
    out["enabled"] = enabled
    return out


def settings_schedules() -> dict[str, dict]:
    """Every schedule of ``WORKQUEUE["SCHEDULES"]``, validated (raises on the first bad one)."""
    return {name: from_settings_entry(name, raw) for name, raw in wq_settings().schedules.items()}


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
