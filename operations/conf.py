"""The ``OPERATIONS`` setting, read through one object with documented defaults.

Example (every key optional)::

    OPERATIONS = {
        "TABLE_PREFIX": "",          # "ddb" renders the table ddb_operations
        "QUEUE": "operations",       # the work queue operations are enqueued on by default
        "NOTIFY_CHANNEL": "operations",
        "LEASE": 120,                # seconds; extended by every progress flush
        "PROGRESS_INTERVAL": 2,      # must be shorter than LEASE
        "MAX_ATTEMPTS": 5,
    }

Durations are seconds (int/float) or ``datetime.timedelta``. ``manage.py check`` names a bad
value (operations.E001).
"""

from __future__ import annotations

import re
from functools import cache

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from operations.exceptions import OperationsSettingsError
from workqueue.conf import QUEUE_NAME, count, known_keys, seconds

DAY = 86400.0

DEFAULTS: dict[str, object] = {
    "TABLE_PREFIX": "",  # namespace for the table: "ddb" -> ddb_operations (fixed at import time)
    "QUEUE": "operations",  # the work queue start() enqueues on when no queue= is given
    "QUEUES": None,  # every queue the operations handler serves (default: [QUEUE])
    "NOTIFY_CHANNEL": "operations",  # payload-free NOTIFY on every write; "" turns it off
    "RETENTION": 30 * DAY,  # a terminal operation is kept this long before reap deletes it
    "REAP_BATCH": 1000,  # operations one reap deletes at most
    "RECOVER_AFTER": 60.0,  # a pending operation with no live work item this old is re-offered
    "RECOVER_BATCH": 200,  # stranded operations one recover re-offers at most
    "LEASE": 120.0,  # the one lease of a running operation (row and work item), renewed by flushes
    "RETRY_DELAY": 30.0,  # seconds before a failed attempt is offered again
    "MAX_ATTEMPTS": 5,  # attempts before attempts_exhausted; a kind may set its own; never unlimited
    "PROGRESS_INTERVAL": 2.0,  # seconds between progress flushes (and cancel checks, lease renewals)
    "WATCHER_POLL": 2.0,  # the watcher re-reads followed operations this often without a NOTIFY
    "WATCHER_MIN_READ_INTERVAL": 0.25,  # and never more often than this, however many wakes arrive
    "WATCHER_MAX_SUBSCRIPTIONS": 1024,  # watches one process follows at once (TooManyWatchers past it)
    "SSE_KEEPALIVE": 15.0,  # seconds between ':' comments on an idle watch stream
    # under WSGI, an idle stream writes a ':' comment this often instead: a WSGI app learns that a
    # client hung up only when a write fails, so this is how soon a closed stream frees its thread
    "SSE_WSGI_KEEPALIVE": 1.0,
    # watch streams one user (their API and admin streams together) or one owner may hold open
    # in one process (429 past it)
    "WATCH_MAX_PER_OWNER": 4,
    # watch streams one WSGI process holds open at once, across every user: each holds a server
    # thread, so keep it well below the server's threads (503 past it; ASGI streams hold none)
    "WATCH_MAX_THREADS": 8,
    "WATCH_MAX_DURATION": 300.0,  # a watch stream ends after this long; the client reconnects
    "OWNER_RESOLVER": "operations.http.default_owner",  # dotted path: request -> owner string or None
    # names of request and result fields the admin shows as "••••", at any depth, whatever the
    # case (as Mission Control's filter_arguments): e.g. ["password", "token"]
    "ADMIN_MASKED_FIELDS": [],
}

_DURATIONS = {
    "RETENTION",
    "RECOVER_AFTER",
    "LEASE",
    "PROGRESS_INTERVAL",
    "WATCHER_POLL",
    "WATCHER_MIN_READ_INTERVAL",
    "SSE_KEEPALIVE",
    "SSE_WSGI_KEEPALIVE",
    "WATCH_MAX_DURATION",
}
_ZERO_OK = {"RETRY_DELAY"}
_COUNTS = {
    "REAP_BATCH",
    "RECOVER_BATCH",
    "MAX_ATTEMPTS",
    "WATCHER_MAX_SUBSCRIPTIONS",
    "WATCH_MAX_PER_OWNER",
    "WATCH_MAX_THREADS",
}
_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class OperationsSettings:
    """The validated ``OPERATIONS`` setting. Read it with :func:`ops_settings`."""

    # Set from _DURATIONS, _ZERO_OK and _COUNTS by name (the lowercased key), declared here.
    retention: float
    recover_after: float
    lease: float
    progress_interval: float
    watcher_poll: float
    watcher_min_read_interval: float
    sse_keepalive: float
    sse_wsgi_keepalive: float
    watch_max_duration: float
    retry_delay: float
    reap_batch: int
    recover_batch: int
    max_attempts: int
    watcher_max_subscriptions: int
    watch_max_per_owner: int
    watch_max_threads: int

    def __init__(self, raw: object):
        raw = {} if raw is None else raw
        if not isinstance(raw, dict):
            raise OperationsSettingsError(f"OPERATIONS must be a dict, not {type(raw).__name__}.")
        known_keys(raw, DEFAULTS, what="OPERATIONS", error=OperationsSettingsError)
        merged = {**DEFAULTS, **raw}
        for key in _DURATIONS | _ZERO_OK:
            what = f"OPERATIONS[{key!r}]"
            value = seconds(merged[key], what=what, allow_zero=key in _ZERO_OK, error=OperationsSettingsError)
            setattr(self, key.lower(), value)
        for key in _COUNTS:
            what = f"OPERATIONS[{key!r}]" + (" (attempts are never unlimited)" if key == "MAX_ATTEMPTS" else "")
            setattr(self, key.lower(), count(merged[key], what=what, error=OperationsSettingsError))
        self.table_prefix: str = table_prefix(merged["TABLE_PREFIX"])
        channel = merged["NOTIFY_CHANNEL"]
        if not isinstance(channel, str) or (channel and not _IDENT.match(channel)):
            raise OperationsSettingsError(
                f"OPERATIONS['NOTIFY_CHANNEL'] must be '' or a lowercase SQL identifier, not {channel!r}."
            )
        self.notify_channel: str = channel
        queue = merged["QUEUE"]
        if not isinstance(queue, str) or not QUEUE_NAME.match(queue):
            raise OperationsSettingsError(f"OPERATIONS['QUEUE'] must be a queue name, not {queue!r}.")
        self.queue: str = queue
        queues = merged["QUEUES"]
        if queues is None:
            queues = [queue]
        if not isinstance(queues, list | tuple) or not all(isinstance(q, str) and QUEUE_NAME.match(q) for q in queues):
            raise OperationsSettingsError(f"OPERATIONS['QUEUES'] must be a list of queue names, not {queues!r}.")
        # The django.tasks backend runs tasks as operations on queues of its own: one per name in
        # a backend's QUEUES, or, for QUEUES [] (Django's "any queue name"), a queue family:
        # every queue named its QUEUE_PREFIX + anything.
        self.task_queues: list[str] = task_backend_queues()
        self.task_families: list[str] = task_backend_families()
        self.queues: list[str] = sorted({queue, *queues, *self.task_queues})
        resolver = merged["OWNER_RESOLVER"]
        if not isinstance(resolver, str) and not callable(resolver):
            raise OperationsSettingsError("OPERATIONS['OWNER_RESOLVER'] must be a dotted path or a callable.")
        self.owner_resolver = resolver
        masked = merged["ADMIN_MASKED_FIELDS"]
        if not isinstance(masked, list | tuple) or not all(isinstance(f, str) and f for f in masked):
            raise OperationsSettingsError(
                f"OPERATIONS['ADMIN_MASKED_FIELDS'] must be a list of field names, not {masked!r}."
            )
        self.admin_masked_fields: frozenset[str] = frozenset(f.lower() for f in masked)
        if self.progress_interval >= self.lease:
            raise OperationsSettingsError(
                f"OPERATIONS['PROGRESS_INTERVAL'] ({self.progress_interval:g}s) must be shorter than "
                f"OPERATIONS['LEASE'] ({self.lease:g}s): a flush is what extends the lease, so a longer "
                "interval lets every running operation be taken over between flushes."
            )

    @property
    def table(self) -> str:
        return table_name(self.table_prefix)

    def serves(self, queue: str) -> bool:
        """Whether the operations handler serves ``queue``: one of ``queues``, or a task family's."""
        return queue in self.queues or (bool(self.task_families) and queue.startswith(tuple(self.task_families)))


TASK_BACKEND = "operations.tasks.backend.OperationsBackend"
DEFAULT_TASK_QUEUE_PREFIX = "tasks."


def _task_backends() -> list[tuple[str, object]]:
    """(QUEUE_PREFIX, QUEUES) of each TASKS backend of ours (QUEUES None when not given)."""
    out = []
    for params in (getattr(settings, "TASKS", None) or {}).values():
        if not isinstance(params, dict) or params.get("BACKEND") != TASK_BACKEND:
            continue
        options = params.get("OPTIONS") or {}
        prefix = options.get("QUEUE_PREFIX", DEFAULT_TASK_QUEUE_PREFIX) if isinstance(options, dict) else ""
        if isinstance(prefix, str):
            out.append((prefix, params.get("QUEUES")))
    return out


def task_backend_queues() -> list[str]:
    """Workqueue queues the TASKS backends of ours use: QUEUE_PREFIX + each Django queue name
    (a backend without QUEUES has Django's ["default"])."""
    out = []
    for prefix, names in _task_backends():
        for name in ["default"] if names is None else names if isinstance(names, list | tuple | set) else []:
            if isinstance(name, str):
                out.append(prefix + name)
    return out


def task_backend_families() -> list[str]:
    """The QUEUE_PREFIX of each TASKS backend of ours whose QUEUES is empty (Django: any queue
    name): every queue named that prefix + anything is a task queue."""
    return sorted({prefix for prefix, names in _task_backends() if names is not None and not names and prefix})


def table_prefix(prefix: object) -> str:
    """Return ``prefix`` if it is a valid TABLE_PREFIX ('' or a lowercase SQL identifier)."""
    if not isinstance(prefix, str) or (prefix and not _IDENT.match(prefix)) or prefix.endswith("_"):
        raise OperationsSettingsError(
            "OPERATIONS['TABLE_PREFIX'] must be '' or a lowercase SQL identifier not ending in '_' "
            f"(letters a-z, digits, '_'; at most 63 characters), not {prefix!r}."
        )
    return prefix


def table_name(prefix: str = "") -> str:
    """The operations table's name for a namespace prefix: '' -> operations, 'ddb' -> ddb_operations."""
    return f"{prefix}_operations" if prefix else "operations"


@cache
def ops_settings() -> OperationsSettings:
    """The validated settings (cached; reset when tests override ``OPERATIONS``)."""
    return OperationsSettings(getattr(settings, "OPERATIONS", None))


def configured_table() -> str:
    """The table name the model and the migration use, read once from settings.

    The prefix is pasted into SQL (the model's table, every statement in sql/queries.sql), so
    it is validated here, where it is first read: a bad one stops the process at start-up.
    """
    raw = getattr(settings, "OPERATIONS", None) or {}
    return table_name(table_prefix(raw.get("TABLE_PREFIX", "") if isinstance(raw, dict) else ""))


@receiver(setting_changed)
def _reset(setting, **kwargs):
    if setting in ("OPERATIONS", "TASKS"):
        ops_settings.cache_clear()
