"""What a schedule is: its fields, checked the same way from the admin, the command and settings."""

from __future__ import annotations

import json
import re

from django.conf import settings as django_settings

from workqueue import handlers, hooks, values
from workqueue.conf import QUEUE_NAME, wq_settings
from workqueue.exceptions import InvalidInput, InvalidSchedule
from workqueue.schedules.timing import check_cron, check_timezone

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")

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
    name = name if name is not None else fields.get("name")
    where = f"schedule {name!r}: "
    try:
        if not isinstance(name, str) or not NAME.match(name):
            raise InvalidSchedule(
                f"bad schedule name {name!r}: use letters, digits, '.', '_' or '-', at most 200 characters"
            )
        out = dict(fields)
        out["name"] = name
        _validate_timing(out)
        out["priority"] = values.priority(out.get("priority", 0), error=InvalidSchedule)
        targets = [t for t, f in (("item", "queue"), ("operation", "kind"), ("task", "task")) if out.get(f)]
        if len(targets) != 1:
            raise InvalidSchedule(
                "give exactly one thing to run: a queue (a work item), an operation kind, or a task's dotted path"
            )
        out["target"] = targets[0]
        if out["target"] == "item":
            _validate_item_target(out)
        else:
            _validate_hooked_target(out)
        for key in ("metadata", "request", "args"):
            try:
                json.dumps(out.get(key), allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise InvalidSchedule(f"{key} must be JSON-serialisable ({exc})")
        for key, default in _DEFAULTS.items():
            out.setdefault(key, default() if callable(default) else default)
        return out
    except InvalidSchedule as exc:
        message = str(exc)
        raise InvalidSchedule(message if message.startswith(where) else where + message)


#: What a validated definition holds for the fields it did not give.
_DEFAULTS: dict = {
    "metadata": dict,
    "args": list,
    "key_prefix": "",
    "queue": "",
    "kind": "",
    "task": "",
    "request": None,
    "priority": 0,
}


def _validate_timing(out: dict) -> None:
    """cron or every (exactly one), the timezone and the misfire policy, normalised in place."""
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


def _validate_item_target(out: dict) -> None:
    """A work-item schedule: a known queue, its metadata and key prefix."""
    from workqueue.items import validate_metadata

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


def _validate_hooked_target(out: dict) -> None:
    """An operation or task schedule: checked by the operations app's hook."""
    hook = hooks.schedule_target(out["target"])
    if hook is None:
        raise InvalidSchedule(f"{out['target']} schedules need the operations app: add 'operations' to INSTALLED_APPS")
    if out["target"] == "task" and not isinstance(out.get("args") or [], list):
        raise InvalidSchedule(f"task args must be a JSON list, not {out.get('args')!r}")
    problems = hook[1](out)
    if problems:
        raise InvalidSchedule("; ".join(problems))


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
