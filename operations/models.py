"""The operation row: what was asked, how far along it is, how it ended.

States form a closed set::

    pending ──begin──► running ──finish──► succeeded | failed | cancelled
       │  ▲               │
       │  └──release──────┘   (a retryable failure, or a worker shutting down)
       └──cancel──► cancelled

``done`` is derived from the state on every read, never stored. ``revision`` rises by one on
every write, which is how the watcher tells a new snapshot from an old one. The SQL that moves
a row is in ``operations/sql/queries.sql``.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from operations.conf import configured_table


class State(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({State.SUCCEEDED, State.FAILED, State.CANCELLED})
ACTIVE_STATES = (State.PENDING, State.RUNNING)


@dataclass(frozen=True, slots=True)
class Progress:
    """Two tiers, neither required: units (with a denominator) and a monotonic count."""

    units_total: int | None
    units_done: int
    unit: str
    message: str
    count_label: str
    count: int

    def fraction(self) -> float | None:
        """Progress in [0, 1], or None when no unit total was declared (never a guessed 0 or 1)."""
        if not self.units_total:
            return None
        return max(0.0, min(1.0, self.units_done / self.units_total))

    def describe(self) -> str:
        """'3 of 9 domains', '4,300 records', or ''."""
        parts = []
        if self.units_total:
            parts.append(f"{self.units_done:,} of {self.units_total:,}")
        if self.count or (self.count_label and not self.units_total):
            parts.append(f"{self.count:,} {self.count_label}".strip())
        return " · ".join(parts)


@dataclass(frozen=True, slots=True)
class Result:
    """What a succeeded operation produced: a pointer and a small note, never the payload."""

    uri: str = ""
    detail: object = None


@dataclass(frozen=True, slots=True)
class Error:
    """Why a failed (or cancelled-with-error) operation ended: a stable code a client branches on."""

    code: str
    message: str = ""
    retryable: bool = False


class OperationQuerySet(models.QuerySet):
    """A scope per state; the admin and the sweeps read through these."""

    def pending(self):
        return self.filter(state=State.PENDING)

    def running(self):
        return self.filter(state=State.RUNNING)

    def active(self):
        return self.filter(state__in=ACTIVE_STATES)

    def terminal(self):
        return self.filter(state__in=TERMINAL_STATES)

    def succeeded(self):
        return self.filter(state=State.SUCCEEDED)

    def failed(self):
        return self.filter(state=State.FAILED)

    def cancelled(self):
        return self.filter(state=State.CANCELLED)

    def lapsed(self):
        """Running with a lease that ran out: its worker died or went silent."""
        return self.running().filter(claimed_until__lt=Now())

    def owned_by(self, owner: str):
        return self.filter(owner=owner)


class Operation(models.Model):
    """One long-running unit of work. ``done`` is derived from ``state``."""

    #: Set on what ``operations.start`` returns: whether that call created it (False: an
    #: operation with the same id already existed). Not a column.
    created: bool

    id = models.CharField(primary_key=True, max_length=200)
    kind = models.CharField(max_length=128)
    owner = models.CharField(max_length=200, blank=True, db_default="")
    state = models.CharField(max_length=16, choices=State.choices, db_default=State.PENDING)
    queue = models.CharField(max_length=128, db_default="operations")
    priority = models.IntegerField(db_default=0)
    request = models.JSONField(null=True, blank=True)
    units_total = models.IntegerField(null=True, blank=True)
    units_done = models.IntegerField(db_default=0)
    unit = models.CharField(max_length=1024, blank=True, db_default="")
    message = models.CharField(max_length=1024, blank=True, db_default="")
    count_label = models.CharField(max_length=64, blank=True, db_default="")
    count = models.BigIntegerField(db_default=0)
    result_uri = models.TextField(blank=True, db_default="")
    result_detail = models.JSONField(null=True, blank=True)
    error_code = models.CharField(max_length=128, blank=True, db_default="")
    error_message = models.CharField(max_length=1024, blank=True, db_default="")
    error_retryable = models.BooleanField(null=True, blank=True)
    attempts = models.IntegerField(db_default=0)
    max_attempts = models.IntegerField(db_default=5)
    attempt_log = models.JSONField(db_default=models.Value([], output_field=models.JSONField()), blank=True)
    cancel_requested = models.BooleanField(db_default=False)
    revision = models.BigIntegerField(db_default=1)
    claimed_until = models.DateTimeField(null=True, blank=True)
    lease_token = models.UUIDField(null=True, blank=True, editable=False)
    worker_id = models.CharField(max_length=200, blank=True, db_default="")
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = OperationQuerySet.as_manager()

    class Meta:
        db_table = configured_table()
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=["pending", "running", "succeeded", "failed", "cancelled"]),
                name="operations_state_valid",
            ),
        ]
        indexes = [
            # An owner's operations, newest first: the HTTP list and its keyset pages.
            models.Index(
                models.F("owner"), models.F("created_at").desc(), models.F("id").desc(), name="operations_owner_idx"
            ),
            # By state (the admin's filter, the dashboard counts), newest first.
            models.Index(
                models.F("state"), models.F("created_at").desc(), models.F("id").desc(), name="operations_state_idx"
            ),
            # By kind, newest first.
            models.Index(
                models.F("kind"), models.F("created_at").desc(), models.F("id").desc(), name="operations_kind_idx"
            ),
            # recover: the unfinished rows only. Deliberately not on updated_at/claimed_until:
            # a progress flush changes only unindexed columns, so Postgres updates the row in
            # place (a HOT update) without touching any index.
            models.Index(
                fields=["state"],
                condition=Q(state__in=["pending", "running"]),
                name="operations_unfinished_idx",
            ),
            # reap: terminal rows by when they finished.
            models.Index(
                fields=["finished_at"],
                condition=Q(state__in=["succeeded", "failed", "cancelled"]),
                name="operations_reap_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.kind}, {self.state})"

    # -- the read model -----------------------------------------------------------------

    @property
    def done(self) -> bool:
        """The one field a client must understand: False while it may change, True once it will not."""
        return self.state in TERMINAL_STATES

    @property
    def progress(self) -> Progress:
        return Progress(
            units_total=self.units_total,
            units_done=self.units_done or 0,
            unit=self.unit or "",
            message=self.message or "",
            count_label=self.count_label or "",
            count=self.count or 0,
        )

    @property
    def result(self) -> Result | None:
        if self.state != State.SUCCEEDED:
            return None
        return Result(uri=self.result_uri or "", detail=self.result_detail)

    @property
    def error(self) -> Error | None:
        if not self.error_code or self.state not in (State.FAILED, State.CANCELLED, State.PENDING):
            return None
        return Error(code=self.error_code, message=self.error_message or "", retryable=bool(self.error_retryable))


class OperationWatch(models.Model):
    """A process following an operation for its subscribers: writes to the operation send a
    NOTIFY while one exists (see operations.watcher). Rows expire unless refreshed."""

    op_id = models.CharField(max_length=200)
    watcher = models.CharField(max_length=200)
    until = models.DateTimeField()

    class Meta:
        db_table = f"{configured_table()}_watches"
        constraints = [models.UniqueConstraint(fields=["op_id", "watcher"], name="operation_watches_uniq")]

    def __str__(self) -> str:
        return f"{self.watcher} follows {self.op_id}"
