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
from workqueue.indexes import JsonbPathIndex


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

#: The kinds of the operations ``operations.batch()`` and ``operations.chain()`` create: never
#: run by a worker (they have no work item); their children's ends settle them.
BATCH_KIND = "operations.batch"
CHAIN_KIND = "operations.chain"
PARENT_KINDS = (BATCH_KIND, CHAIN_KIND)


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

    def children_of(self, parent_id: str):
        """A batch's or chain's children, in order (through operations_children_idx)."""
        return self.filter(parent_id=parent_id).order_by("position")

    def parents(self):
        """Batches and chains."""
        return self.filter(kind__in=PARENT_KINDS)

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
    # Batches and chains (operations.batches): a child names its parent and its place among
    # the parent's children; ``fanned_in`` records that its end was counted on the parent
    # (exactly once, by op_fan_in); ``follows_id`` names the batch or chain whose end
    # started this operation (its ``then``). A parent keeps its children's tally.
    parent_id = models.CharField(max_length=200, null=True, blank=True)
    position = models.IntegerField(null=True, blank=True)
    follows_id = models.CharField(max_length=200, null=True, blank=True)
    fanned_in = models.BooleanField(db_default=False)
    children_total = models.IntegerField(db_default=0)
    children_succeeded = models.IntegerField(db_default=0)
    children_failed = models.IntegerField(db_default=0)
    children_cancelled = models.IntegerField(db_default=0)
    # Workflows (operations.workflows): ``workflow`` marks a workflow's run; while one waits
    # (pending, its work item due at ``wake_at``) ``wait_kind`` says for what (sleep, signal)
    # and ``wait_name`` names the signal; ``wake_pending`` records a signal that arrived while
    # it ran, so the wait it is about to record ends at once. ``forked_from_id`` names the run a
    # fork copied its first steps from.
    workflow = models.BooleanField(db_default=False)
    wait_kind = models.CharField(max_length=16, blank=True, db_default="")
    wait_name = models.CharField(max_length=200, blank=True, db_default="")
    wake_at = models.DateTimeField(null=True, blank=True)
    wake_pending = models.BooleanField(db_default=False)
    forked_from_id = models.CharField(max_length=200, null=True, blank=True)
    # Dependencies (``start(..., after=[ids])``, operations.deps): how many of its dependencies
    # have not yet succeeded (it is not claimable while above 0: it has no work item), and
    # whether some operation started while this one was unfinished depends on it (its end then
    # decides theirs, in the same transaction; the end of one without skips the decision).
    deps_open = models.IntegerField(db_default=0)
    has_dependents = models.BooleanField(db_default=False)

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
            # Newest first: the admin's list (without it, a sort of the whole table per page).
            models.Index(models.F("created_at").desc(), models.F("id").desc(), name="operations_created_idx"),
            # By state (the admin's filter, the dashboard counts), newest first.
            models.Index(
                models.F("state"), models.F("created_at").desc(), models.F("id").desc(), name="operations_state_idx"
            ),
            # The admin's search by request (account=42): a containment, the one operator
            # jsonb_path_ops serves. The request never changes, so a progress flush stays HOT.
            JsonbPathIndex(fields=["request"], name="operations_request_idx"),
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
            # A parent's children in order: the admin's and the API's keyset pages, reap's
            # "a parent and its children go together", a batch cancel. Only children are in it.
            models.Index(
                fields=["parent_id", "position"],
                condition=Q(parent_id__isnull=False),
                name="operations_children_idx",
            ),
            # recover: children that ended but were never counted on their parent. Empty but
            # for a crash: op_fan_in runs in the transaction that ends the child.
            models.Index(
                fields=["finished_at"],
                condition=Q(parent_id__isnull=False, fanned_in=False, state__in=["succeeded", "failed", "cancelled"]),
                name="operations_fan_in_due_idx",
            ),
            # The admin's "waiting workflows" filter: only waiting rows are in it.
            models.Index(
                fields=["wake_at"],
                condition=Q(state="pending") & ~Q(wait_kind=""),
                name="operations_waiting_idx",
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
    def is_parent(self) -> bool:
        """Whether this is a batch or a chain (its children settle it)."""
        return self.kind in PARENT_KINDS

    @property
    def children_open(self) -> int:
        return max(0, self.children_total - self.children_succeeded - self.children_failed - self.children_cancelled)

    def child_counts(self) -> dict[str, int]:
        """A parent's children by state: terminal ones as tallied, the rest open."""
        return {
            "total": self.children_total,
            "open": self.children_open,
            "succeeded": self.children_succeeded,
            "failed": self.children_failed,
            "cancelled": self.children_cancelled,
        }

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


class OperationStep(models.Model):
    """One recorded step of a workflow run: a checkpointed call, a sleep, a wait, a patch
    marker or a child operation it started, at its position in the run (see operations.workflows).

    ``result`` is the step's JSON result (a wait's signal payload, a sleep's nothing); a
    failed step keeps its final ``error`` ({code, message, exception}). Rows go with their
    operation (reap deletes them in the same statement)."""

    op_id = models.CharField(max_length=200)
    position = models.IntegerField()
    name = models.CharField(max_length=200)
    #: step, sleep, wait, patch, child
    kind = models.CharField(max_length=16, db_default="step")
    #: running, succeeded, failed, waiting
    state = models.CharField(max_length=16, db_default="running")
    attempts = models.IntegerField(db_default=0)
    started_at = models.DateTimeField(db_default=Now())
    finished_at = models.DateTimeField(null=True, blank=True)
    wake_at = models.DateTimeField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    #: Copied from the run a fork was made from (it did not run in this one).
    copied = models.BooleanField(db_default=False)

    class Meta:
        db_table = f"{configured_table()}_steps"
        ordering = ["op_id", "position"]
        constraints = [models.UniqueConstraint(fields=["op_id", "position"], name="operation_steps_uniq")]

    def __str__(self) -> str:
        return f"{self.op_id} #{self.position} {self.name} ({self.state})"

    @property
    def duration(self):
        if self.finished_at is None or self.started_at is None:
            return None
        return self.finished_at - self.started_at


class OperationSignal(models.Model):
    """A signal sent to a workflow (``operations.signal``): kept until a ``wf.wait`` of its
    name takes it (oldest first), which records the position that took it."""

    op_id = models.CharField(max_length=200)
    name = models.CharField(max_length=200)
    payload = models.JSONField(null=True, blank=True)
    sent_at = models.DateTimeField(db_default=Now())
    taken_at = models.DateTimeField(null=True, blank=True)
    taken_by_position = models.IntegerField(null=True, blank=True)

    class Meta:
        db_table = f"{configured_table()}_signals"
        ordering = ["op_id", "id"]
        indexes = [
            # A wait's "the oldest untaken signal of this name": untaken ones only.
            models.Index(
                fields=["op_id", "name", "id"], condition=Q(taken_at__isnull=True), name="operation_signals_open_idx"
            ),
            models.Index(fields=["op_id", "id"], name="operation_signals_op_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.name} → {self.op_id}"


class OperationDependency(models.Model):
    """``start(..., after=[ids])``: operation ``op_id`` runs once ``after_id`` succeeded."""

    op_id = models.CharField(max_length=200)
    after_id = models.CharField(max_length=200)
    # Whether ``after_id``'s end was counted on ``op_id`` (exactly once, by op_deps_settle; an
    # edge onto a dependency already ended when ``op_id`` started is recorded decided).
    decided = models.BooleanField(db_default=False)

    class Meta:
        db_table = f"{configured_table()}_dependencies"
        constraints = [models.UniqueConstraint(fields=["after_id", "op_id"], name="operation_dependencies_uniq")]
        indexes = [
            models.Index(fields=["op_id"], name="operation_dependencies_op_idx"),
            # recover: edges whose dependency's end was never counted. Only open edges are in it.
            models.Index(fields=["after_id"], condition=Q(decided=False), name="operation_deps_open_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.op_id} after {self.after_id}"
