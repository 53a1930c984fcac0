"""The ``WORKQUEUE`` setting: one dict, read through one object with documented defaults.

Example (every key optional)::

    WORKQUEUE = {
        "QUEUES": {
            "default": {},
            "emails": {"lease": 30, "max_attempts": 10, "retry_delay": 5},
            "reports": {"max_running": 3, "hard_timeout": 3600},
            "tool_exec": {"over_wire": True},
        },
        "QUEUE_DEFAULTS": {"lease": 60},
        "CONCURRENCY": 4,
    }

Durations are seconds (int or float) or ``datetime.timedelta``. ``manage.py check`` reports a
bad value by name (workqueue.E001…); code that reads a bad setting raises
``workqueue.exceptions.WorkqueueSettingsError``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields, replace
from functools import cache
from typing import Any, Literal, overload

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from workqueue import values
from workqueue.exceptions import InvalidInput, WorkqueueSettingsError

QUEUE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
DAY = 86400.0


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """Per-queue settings. Every field is a key of ``WORKQUEUE["QUEUES"][name]``."""

    name: str = ""
    #: Seconds a claim holds an item before another worker may take it (renewed while it runs).
    lease: float = 60.0
    #: Claims an item may have before it is failed for good; never unlimited.
    max_attempts: int = 5
    #: Seconds before the first retry; later retries multiply it by ``retry_backoff``.
    retry_delay: float = 10.0
    #: Factor each later retry's delay is multiplied by (``retry_delay * backoff ** (attempt - 1)``).
    retry_backoff: float = 2.0
    #: Upper bound on one retry's delay, seconds.
    max_retry_delay: float = 3600.0
    #: Priority given to items enqueued without one (higher runs first).
    priority: int = 0
    #: Fleet-wide cap on items of this queue held at once (None = no cap).
    max_running: int | None = None
    #: Fleet-wide cap on items of one group (``enqueue(group=...)``) held at once (None = no cap).
    max_running_per_group: int | None = None
    #: Fleet-wide cap on items of this queue started per period, as (count, seconds); written
    #: ``"50/s"``, ``"600/m"`` or ``"10000/h"`` in settings (None = no rate limit).
    rate: tuple[int, float] | None = None
    #: The same per group (None = no per-group rate limit).
    rate_per_group: tuple[int, float] | None = None
    #: Seconds an attempt may run before the reaper fails it (None = never by wall clock).
    hard_timeout: float | None = None
    #: Items of this queue in self_hosted environments are served over HTTP Poll only.
    over_wire: bool = False
    #: Seconds without ``ctx.progress()`` before the holder is cancelled (None = no stall check).
    stall: float | None = None
    #: Seconds a stopped item is kept before ``reap`` deletes it.
    retention: float = 7 * DAY
    #: "processes": runworker runs this queue's sync handler in its process pool (CPU-bound
    #: work); "threads" (None): on its threads. The handler's own ``pool=`` wins.
    pool: str | None = None

    def retry_delay_for(self, attempts: int) -> float:
        """Backoff before the retry that follows attempt number ``attempts``."""
        try:
            delay = self.retry_delay * (self.retry_backoff ** max(attempts - 1, 0))
        except OverflowError:  # a large backoff after many attempts: past any cap
            delay = math.inf
        return min(delay, self.max_retry_delay)


QUEUE_KEYS = {f.name for f in fields(QueueSettings)} - {"name"}

# Top-level keys, their defaults and meaning (the README's settings table is built from this).
DEFAULTS: dict[str, object] = {
    "QUEUES": {},  # name -> per-queue dict (see QueueSettings)
    "QUEUE_DEFAULTS": {},  # per-queue keys applied to every queue before its own
    "NOTIFY_CHANNEL": "workqueue",  # LISTEN/NOTIFY channel that wakes idle workers
    "LISTEN_DATABASE_URL": None,  # direct connection for LISTEN when the main one goes through a pooler
    "PREPARED_STATEMENTS": True,  # prepare hot statements per connection (off behind PgBouncer < 1.21)
    "POLL_INTERVAL": 5.0,  # backstop seconds between claim passes when no NOTIFY arrives
    "BATCH": 10,  # items one claim statement takes
    "CONCURRENCY": 4,  # threads running items in one runworker process
    "ASYNC_CONCURRENCY": 100,  # async def handlers one runworker process runs at once on its event loop
    "SHUTDOWN_GRACE": 30.0,  # seconds running items get to finish after SIGTERM
    # a run whose database connection died is released with its attempt refunded this many
    # times in a row; every later loss in the row costs the attempt (0: every loss costs it)
    "CONNECTION_LOSS_REFUNDS": 3,
    "WORKER_HEARTBEAT": 10.0,  # seconds between a worker's rows in the workers table
    "WORKER_STALE_AFTER": 60.0,  # a worker not seen for this long shows as stale
    "WORKER_FORGET_AFTER": 7 * DAY,  # reap deletes worker rows not seen for this long
    "STARTUP_LEASE": 60.0,  # wire: lease an ack installs until the first heartbeat
    "HEARTBEAT_TTL": 60.0,  # wire: lease a heartbeat extends by default
    "HEARTBEAT_TTL_MIN": 10.0,  # wire: desired_ttl_seconds is clamped to [MIN, MAX]
    "HEARTBEAT_TTL_MAX": 600.0,  # wire: the upper end of that clamp
    "POLLING_WINDOW": 30.0,  # wire: a poller counts in workers_polling for this long
    "FINALIZE_BATCH": 50,  # wire: abandoned stopping items one poll finalizes
    "RECOVER_BATCH": 500,  # recover: items per sweep
    "REAP_BATCH": 1000,  # reap: rows per sweep
    "STUCK_AFTER": 300.0,  # a queued item this far past its run_after counts as stuck
    "MAINTENANCE_WARN_AFTER": 600.0,  # a check warns when neither recover nor reap ran for this long
    "METRICS_TOKEN": None,  # /metrics answers only 'Authorization: Bearer <token>' when set (None: public)
    "METRICS_CACHE": 5.0,  # seconds a scrape's figures are reused by later scrapes (0: read every time)
    "MAX_POLLERS": 1000,  # wire: distinct worker ids one environment may have polling at once (429 past it)
    "SCHEDULES": {},  # name -> schedule dict (see workqueue.schedules), synced to work_schedules
    "SCHEDULE_BATCH": 100,  # due schedules one firing transaction takes
    "SCHEDULE_CATCHUP": 100,  # missed slots the `all` policy fires at most, per schedule and pass
    "SCHEDULE_GRACE": 10.0,  # a slot fired later than this counts as missed (`skip` drops it)
    # seconds a worker whose claim was held back by max_running / max_running_per_group waits
    # before it looks again (a rate limit says exactly when its next start is free)
    "FLOW_RECHECK": 0.5,
    "CONTROLS_CACHE": 1.0,  # seconds a process trusts its read of the runtime queue controls
    # port on which each runworker serves its own Prometheus metrics (None: off; --metrics-port)
    "WORKER_METRICS_PORT": None,
    "WORKER_METRICS_ADDRESS": "0.0.0.0",  # address that server listens on ("127.0.0.1": this host only)
}

_DURATIONS = {
    "POLL_INTERVAL",
    "SHUTDOWN_GRACE",
    "WORKER_HEARTBEAT",
    "WORKER_STALE_AFTER",
    "WORKER_FORGET_AFTER",
    "STARTUP_LEASE",
    "HEARTBEAT_TTL",
    "HEARTBEAT_TTL_MIN",
    "HEARTBEAT_TTL_MAX",
    "POLLING_WINDOW",
    "STUCK_AFTER",
    "MAINTENANCE_WARN_AFTER",
    "SCHEDULE_GRACE",
    "FLOW_RECHECK",
    "CONTROLS_CACHE",
}
_COUNTS = {
    "BATCH",
    "CONCURRENCY",
    "ASYNC_CONCURRENCY",
    "RECOVER_BATCH",
    "REAP_BATCH",
    "FINALIZE_BATCH",
    "SCHEDULE_BATCH",
    "SCHEDULE_CATCHUP",
    "MAX_POLLERS",
}


# The settings' validators are workqueue.values' parsers (one per kind, shared with the forms,
# the commands and the Python API), strict about types (no text: a duration is a number or a
# timedelta) and raising the settings' error with a full stop.


@overload
def seconds(
    value: object,
    *,
    what: str,
    allow_none: Literal[False] = False,
    allow_zero: bool = False,
    error: type[Exception] = WorkqueueSettingsError,
) -> float: ...
@overload
def seconds(
    value: object, *, what: str, allow_none: bool, allow_zero: bool = False, error: type[Exception] = ...
) -> float | None: ...
def seconds(
    value: object,
    *,
    what: str,
    allow_none: bool = False,
    allow_zero: bool = False,
    error: type[Exception] = WorkqueueSettingsError,
) -> float | None:
    """Turn a duration setting into seconds (at most ``values.MAX_SECONDS``), or raise ``error`` naming it."""
    try:
        return values.seconds(value, what=what, allow_none=allow_none, allow_zero=allow_zero, text=False)
    except InvalidInput as exc:
        raise error(f"{exc}.") from None


@overload
def count(
    value: object,
    *,
    what: str,
    allow_none: Literal[False] = False,
    minimum: int = 1,
    error: type[Exception] = WorkqueueSettingsError,
) -> int: ...
@overload
def count(
    value: object, *, what: str, allow_none: bool, minimum: int = 1, error: type[Exception] = ...
) -> int | None: ...
def count(
    value: object,
    *,
    what: str,
    allow_none: bool = False,
    minimum: int = 1,
    error: type[Exception] = WorkqueueSettingsError,
) -> int | None:
    """Check a count setting (an integer >= minimum, at most ``values.MAX_COUNT``), or raise ``error`` naming it."""
    try:
        return values.count(value, what=what, allow_none=allow_none, minimum=minimum, text=False)
    except InvalidInput as exc:
        raise error(f"{exc}.") from None


@overload
def factor(
    value: object, *, what: str, allow_none: Literal[False] = False, error: type[Exception] = WorkqueueSettingsError
) -> float: ...
@overload
def factor(value: object, *, what: str, allow_none: bool, error: type[Exception] = ...) -> float | None: ...
def factor(
    value: object, *, what: str, allow_none: bool = False, error: type[Exception] = WorkqueueSettingsError
) -> float | None:
    """Check a multiplier setting (a number >= 1, like a retry backoff), or raise ``error`` naming it."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 1:
        raise error(f"{what} must be a number >= 1, not {value!r}.")
    if value > MAX_FACTOR:
        raise error(f"{what} must be a number from 1 to {MAX_FACTOR:,.0f}, not {value!r}.")
    return float(value)


def metrics_port(value: object, *, what: str, error: type[Exception] = WorkqueueSettingsError) -> int | None:
    """A TCP port to serve metrics on (1 to 65535), or None (off); else raise ``error`` naming it."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise error(
            f"{what} must be a TCP port from 1 to 65535 (e.g. 9100), or None to serve no metrics, not {value!r}."
        )
    return value


MAX_FACTOR = 1000.0
RATE_PERIODS = values.RATE_PERIODS


def parse_rate(value: object, *, what: str, error: type[Exception] = WorkqueueSettingsError) -> tuple[int, float]:
    """Turn ``"50/s"``, ``"600/m"`` or ``"10000/h"`` (or a (count, seconds) pair) into (count, seconds)."""
    try:
        return values.rate(value, what=what)
    except InvalidInput as exc:
        raise error(f"{exc}.") from None


def format_rate(rate: tuple[int, float] | None) -> str:
    """Write a (count, seconds) rate back as ``"50/s"``; '' for None."""
    if rate is None:
        return ""
    unit = {v: k for k, v in RATE_PERIODS.items()}.get(float(rate[1]))
    return f"{rate[0]}/{unit}" if unit else f"{rate[0]}/{rate[1]:g}s"


def known_keys(raw: dict, known, *, what: str, error: type[Exception] = WorkqueueSettingsError) -> None:
    """Refuse keys a settings dict does not know, naming them and the ones it does."""
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise error(
            f"{what} has unknown key(s) {', '.join(map(repr, unknown))}; known keys are {', '.join(sorted(known))}."
        )


def _queue(name: str, raw: object, base: QueueSettings, where: str) -> QueueSettings:
    if not isinstance(raw, dict):
        raise WorkqueueSettingsError(f"{where} must be a dict of queue settings, not {raw!r}.")
    known_keys(raw, QUEUE_KEYS, what=where)
    values: dict[str, Any] = {}  # each value checked for its key's type below
    for key, value in raw.items():
        what = f"{where}[{key!r}]"
        if key in ("lease", "retry_delay", "max_retry_delay", "retention"):
            values[key] = seconds(value, what=what, allow_zero=key == "retry_delay")
        elif key in ("hard_timeout", "stall"):
            values[key] = seconds(value, what=what, allow_none=True)
        elif key == "max_attempts":
            values[key] = count(value, what=what)
        elif key in ("max_running", "max_running_per_group"):
            values[key] = count(value, what=what, allow_none=True)
        elif key in ("rate", "rate_per_group"):
            values[key] = None if value is None else parse_rate(value, what=what)
        elif key == "priority":
            values[key] = count(value, what=what, minimum=-(2**31))
        elif key == "retry_backoff":
            values[key] = factor(value, what=what)
        elif key in ("pool", "over_wire"):
            values[key] = _choice(key, value, what)
    return replace(base, name=name, **values)


def _choice(key: str, value: object, what: str) -> object:
    """A queue's ``over_wire`` (a bool) or ``pool`` ("threads", "processes"; "threads" is None)."""
    if key == "over_wire":
        if not isinstance(value, bool):
            raise WorkqueueSettingsError(f"{what} must be True or False, not {value!r}.")
        return value
    if value not in (None, "threads", "processes"):
        raise WorkqueueSettingsError(f"{what} must be 'threads' or 'processes', not {value!r}.")
    return None if value == "threads" else value


class WorkqueueSettings:
    """The validated ``WORKQUEUE`` setting. Read it with :func:`wq_settings`."""

    # Set from _DURATIONS and _COUNTS by name (the lowercased key), declared here.
    poll_interval: float
    shutdown_grace: float
    worker_heartbeat: float
    worker_stale_after: float
    worker_forget_after: float
    startup_lease: float
    heartbeat_ttl: float
    heartbeat_ttl_min: float
    heartbeat_ttl_max: float
    polling_window: float
    stuck_after: float
    maintenance_warn_after: float
    schedule_grace: float
    flow_recheck: float
    controls_cache: float
    batch: int
    concurrency: int
    async_concurrency: int
    recover_batch: int
    reap_batch: int
    finalize_batch: int
    schedule_batch: int
    schedule_catchup: int
    max_pollers: int

    def __init__(self, raw: object):
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise WorkqueueSettingsError(f"WORKQUEUE must be a dict, not {type(raw).__name__}.")
        known_keys(raw, DEFAULTS, what="WORKQUEUE")
        merged = {**DEFAULTS, **raw}
        for key in _DURATIONS:
            setattr(self, key.lower(), seconds(merged[key], what=f"WORKQUEUE[{key!r}]"))
        for key in _COUNTS:
            setattr(self, key.lower(), count(merged[key], what=f"WORKQUEUE[{key!r}]"))
        self._read_connection(merged)
        self._read_metrics(merged)
        if self.heartbeat_ttl_min > self.heartbeat_ttl_max:
            raise WorkqueueSettingsError(
                "WORKQUEUE['HEARTBEAT_TTL_MIN'] must not exceed WORKQUEUE['HEARTBEAT_TTL_MAX']."
            )
        self.schedules: dict[str, dict] = _schedules(merged["SCHEDULES"])
        self.queue_defaults = _queue("", merged["QUEUE_DEFAULTS"], QueueSettings(), "WORKQUEUE['QUEUE_DEFAULTS']")
        self.queues: dict[str, QueueSettings] = _queues(merged["QUEUES"], self.queue_defaults)
        #: Queues an app declared in code (``declare_queue``) that the site's settings do not list.
        self.declared: dict[str, QueueSettings] = {}
        #: Defaults an app declared for every queue named prefix + anything (``declare_queue_family``).
        self.declared_families: dict[str, QueueSettings] = {}
        self._extra: dict[str, QueueSettings] = {}

    def _read_connection(self, merged: dict) -> None:
        value = merged["NOTIFY_CHANNEL"]
        if not isinstance(value, str) or not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", value):
            raise WorkqueueSettingsError(
                f"WORKQUEUE['NOTIFY_CHANNEL'] must be a plain lowercase SQL identifier, not {value!r}."
            )
        self.notify_channel: str = value
        self.listen_database_url: str | None = merged["LISTEN_DATABASE_URL"]
        if self.listen_database_url is not None and not isinstance(self.listen_database_url, str):
            raise WorkqueueSettingsError("WORKQUEUE['LISTEN_DATABASE_URL'] must be a URL string or None.")
        if not isinstance(merged["PREPARED_STATEMENTS"], bool):
            raise WorkqueueSettingsError("WORKQUEUE['PREPARED_STATEMENTS'] must be True or False.")
        self.prepared_statements: bool = merged["PREPARED_STATEMENTS"]
        self.connection_loss_refunds: int = count(
            merged["CONNECTION_LOSS_REFUNDS"], what="WORKQUEUE['CONNECTION_LOSS_REFUNDS']", minimum=0
        )

    def _read_metrics(self, merged: dict) -> None:
        token = merged["METRICS_TOKEN"]
        if token is not None and (not isinstance(token, str) or not token.strip() or not token.isascii()):
            raise WorkqueueSettingsError(
                f"WORKQUEUE['METRICS_TOKEN'] must be None (public) or a non-empty ASCII string, not {token!r}."
            )
        self.metrics_token: str | None = token
        self.metrics_cache: float = seconds(merged["METRICS_CACHE"], what="WORKQUEUE['METRICS_CACHE']", allow_zero=True)
        self.worker_metrics_port: int | None = metrics_port(
            merged["WORKER_METRICS_PORT"], what="WORKQUEUE['WORKER_METRICS_PORT']"
        )
        address = merged["WORKER_METRICS_ADDRESS"]
        if not isinstance(address, str) or not address.strip() or not address.isascii():
            raise WorkqueueSettingsError(
                "WORKQUEUE['WORKER_METRICS_ADDRESS'] must be an IP address or host name to listen on "
                f"(e.g. '0.0.0.0', '127.0.0.1', '::'), not {address!r}."
            )
        self.worker_metrics_address: str = address.strip()

    def queue(self, name: str) -> QueueSettings:
        """Settings for ``name``: its own entry, its declared defaults, or the defaults for a queue not listed."""
        found = self.queues.get(name) or self.declared.get(name) or self._extra.get(name)
        if found is None:
            found = self._extra[name] = replace(self._family_defaults(name), name=name)
        return found

    def _family_defaults(self, name: str) -> QueueSettings:
        """The declared defaults of the longest family prefix ``name`` starts with, else the defaults."""
        matching = [prefix for prefix in self.declared_families if name.startswith(prefix)]
        return self.declared_families[max(matching, key=len)] if matching else self.queue_defaults

    def declare_family(self, prefix: str, **overrides) -> None:
        """Let another app give every queue named ``prefix`` + anything its defaults."""
        self.declared_families[prefix] = _queue(prefix, overrides, self.queue_defaults, f"defaults for {prefix!r}*")

    def declare(self, name: str, **overrides) -> None:
        """Let another app give a queue its defaults (settings the site wrote still win)."""
        if name in self.queues:
            return
        self.declared[name] = _queue(name, overrides, self.queue_defaults, f"defaults for queue {name!r}")

    def known_queues(self) -> list[QueueSettings]:
        """Every queue the site's settings list or an app declared, by name: the one source
        of queue settings for whatever must see all queues at once (poll's and ack's caps)."""
        return [self.queue(name) for name in sorted({*self.queues, *self.declared})]

    def wire_queues(self) -> list[str]:
        """Names of the known queues served over the wire (``over_wire``)."""
        return [q.name for q in self.known_queues() if q.over_wire]

    def flow_limited(self, q: QueueSettings) -> bool:
        """Whether the settings give ``q`` a per-group cap or a rate (claims then take the flow path)."""
        return q.max_running_per_group is not None or q.rate is not None or q.rate_per_group is not None

    def capped_wire_queues(self) -> list[QueueSettings]:
        """The known ``over_wire`` queues with a ``max_running`` cap, by name."""
        return [q for q in self.known_queues() if q.over_wire and q.max_running is not None]


def _schedules(schedules: object) -> dict[str, dict]:
    if not isinstance(schedules, dict) or not all(isinstance(v, dict) for v in schedules.values()):
        raise WorkqueueSettingsError(
            "WORKQUEUE['SCHEDULES'] must be a dict of schedule name -> schedule dict "
            '(e.g. {"nightly": {"cron": "30 2 * * *", "queue": "reports"}}).'
        )
    # Each schedule is checked by workqueue.schedules (manage.py check: workqueue.E002), so
    # one bad schedule is named on its own instead of breaking every reader of the settings.
    return schedules


def _queues(queues: object, defaults: QueueSettings) -> dict[str, QueueSettings]:
    if not isinstance(queues, dict):
        raise WorkqueueSettingsError("WORKQUEUE['QUEUES'] must be a dict of queue name -> settings dict.")
    found: dict[str, QueueSettings] = {}
    for name, raw_queue in queues.items():
        if not isinstance(name, str) or not QUEUE_NAME.match(name):
            raise WorkqueueSettingsError(
                f"WORKQUEUE['QUEUES'] has a bad queue name {name!r}: use letters, digits, '.', '_', ':' "
                "or '-', at most 128 characters."
            )
        found[name] = _queue(name, raw_queue, defaults, f"WORKQUEUE['QUEUES'][{name!r}]")
    return found


_declared: dict[str, dict] = {}


def declare_queue(name: str, **defaults) -> None:
    """Give ``name`` defaults from code (an app's own queue); the site's settings still win."""
    _declared[name] = defaults
    wq_settings.cache_clear()


_declared_families: dict[str, dict] = {}


def declare_queue_family(prefix: str, **defaults) -> None:
    """Give every queue named ``prefix`` + anything defaults from code (a queue's own entry,
    in the site's settings or declared, still wins)."""
    _declared_families[prefix] = defaults
    wq_settings.cache_clear()


@cache
def wq_settings() -> WorkqueueSettings:
    """The validated settings (cached; reset when tests override ``WORKQUEUE``)."""
    obj = WorkqueueSettings(getattr(settings, "WORKQUEUE", None))
    for name, defaults in _declared.items():
        obj.declare(name, **defaults)
    for prefix, defaults in _declared_families.items():
        obj.declare_family(prefix, **defaults)
    return obj


@receiver(setting_changed)
def _reset(setting, **kwargs):
    if setting == "WORKQUEUE":
        wq_settings.cache_clear()
