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

from workqueue.schedules.definitions import (
    DEFINITION_FIELDS,
    MIN_INTERVAL,
    NAME,
    SETTINGS_KEYS,
    TIMING_FIELDS,
    from_settings_entry,
    parse_interval,
    settings_schedules,
    validate,
)
from workqueue.schedules.firing import (
    Fired,
    PassResult,
    due_slots,
    fire_batch,
    fire_due,
    run_now,
    seconds_until_due,
)
from workqueue.schedules.store import (
    SyncResult,
    add,
    db_now,
    first_slot,
    get,
    notify_changed,
    pause,
    remove,
    resume,
    sync_settings,
    timing_of,
)
from workqueue.schedules.timing import (
    CRON_EXTRA,
    EPOCH,
    MICRO,
    UTC,
    Timing,
    check_cron,
    check_timezone,
    manual_key,
    slot_key,
)

__all__ = [
    "CRON_EXTRA",
    "DEFINITION_FIELDS",
    "EPOCH",
    "MICRO",
    "MIN_INTERVAL",
    "NAME",
    "SETTINGS_KEYS",
    "TIMING_FIELDS",
    "UTC",
    "Fired",
    "PassResult",
    "SyncResult",
    "Timing",
    "add",
    "check_cron",
    "check_timezone",
    "db_now",
    "due_slots",
    "fire_batch",
    "fire_due",
    "first_slot",
    "from_settings_entry",
    "get",
    "manual_key",
    "notify_changed",
    "parse_interval",
    "pause",
    "remove",
    "resume",
    "run_now",
    "seconds_until_due",
    "settings_schedules",
    "slot_key",
    "sync_settings",
    "timing_of",
    "validate",
]
