"""The work item; environments, workers, pollers, API keys, sweep runs.

The work item's state machine (states, outcomes, the named sets and the diagram) is in
``workqueue/states.py``; the SQL that moves it is in ``workqueue/sql/`` (``queries.sql``,
``wire.sql``, and the shared work-item fragments of ``fragments.sql``). ``State``,
``Outcome`` and the ``*_STATES`` sets are re-exported here.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from workqueue.indexes import JsonbPathIndex
from workqueue.managers import WorkItemQuerySet
from workqueue.states import (  # noqa: F401  (re-exported: the documented import path)
    ALL_STATES,
    HELD_STATES,
    LIVE_STATES,
    RUNNING_STATES,
    UNSETTLED_STATES,
    Outcome,
    State,
)
from workqueue.wire.store import WireItemManager


def _mint(prefix: str) -> models.Func:
    return models.Func(models.Value(prefix), function="work_mint_id", output_field=models.CharField())


class Environment(models.Model):
    """Where work runs: ``cloud`` (claimed in-process) or ``self_hosted`` (polled over HTTP)."""

    class Kind(models.TextChoices):
        CLOUD = "cloud"
        SELF_HOSTED = "self_hosted"

    id = models.CharField(primary_key=True, max_length=64, db_default=_mint("env_"), editable=False)
    name = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    key_hint = models.CharField(max_length=16, editable=False, help_text="The key's first characters.")
    created_at = models.DateTimeField(db_default=Now(), editable=False)
    key_rotated_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        db_table = "work_environments"
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"


#: The rows of work_items_unsettled_keyed_idx: every item not yet stopped (its key is never
#: empty). A lookup by key among them says all of it, or the planner cannot use the index.
UNSETTLED_KEYED = Q(state__in=list(UNSETTLED_STATES)) & ~Q(key="")


class WorkItem(models.Model):
    """One unit of work. Columns are documented in SPEC.md; the state machine above."""

    id = models.BigAutoField(primary_key=True)
    public_id = models.CharField(max_length=64, db_default=_mint("work_"), editable=False)
    queue = models.CharField(max_length=128)
    key = models.CharField(max_length=512)
    # No plain index: most items have no environment, and every index costs a write per row
    # version on this table. work_items_environment_idx covers the rows that have one.
    environment = models.ForeignKey(
        Environment, null=True, blank=True, on_delete=models.PROTECT, related_name="work_items", db_index=False
    )
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, null=True, blank=True)
    priority = models.IntegerField(default=0)
    run_after = models.DateTimeField(db_default=Now())
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    lease_token = models.UUIDField(null=True, blank=True, editable=False)
    attempts = models.IntegerField(default=0)
    max_attempts = models.IntegerField(default=5)
    reclaimed = models.BooleanField(default=False)
    handed_out = models.BooleanField(default=False, help_text="Handed out over the wire at least once.")
    wire = models.BooleanField(default=False, help_text="Served by HTTP Poll only (self_hosted, over_wire).")
    last_error = models.TextField(blank=True, db_default="")
    connection_losses = models.PositiveSmallIntegerField(
        db_default=0,
        help_text="Runs in a row that lost their database connection (CONNECTION_LOSS_REFUNDS refunds them).",
    )
    metadata = models.JSONField(default=dict, blank=True)
    trace_context = models.JSONField(null=True, blank=True)
    # One entry per attempt that ended otherwise than by success (retried, failed, lease
    # lapsed, cancelled, ...), the newest 20, written by the statement that ended it (the
    # attempt_ended fragment). A success is the row itself: the admin's timeline adds it.
    attempt_log = models.JSONField(
        db_default=models.Value([], output_field=models.JSONField()), blank=True, editable=False
    )
    claimed_by = models.CharField(max_length=200, blank=True, db_default="")
    # Set at enqueue and never changed by the queue: max_running_per_group and rate_per_group
    # count per (queue, group_key). NULL: in no group, so no per-group limit applies.
    group_key = models.CharField(max_length=200, null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    stop_requested_at = models.DateTimeField(null=True, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)

    objects = WireItemManager.from_queryset(WorkItemQuerySet)()

    class Meta:
        db_table = "work_items"
        ordering = ["-id"]
        constraints = [
            # The wire addresses items by public id (a constraint, not unique=True, so Django
            # adds no varchar_pattern_ops twin: nothing LIKE-searches ids).
            models.UniqueConstraint(fields=["public_id"], name="work_items_public_id_uniq"),
            # Enqueue is idempotent per (queue, key) while a live item exists; the ON CONFLICT
            # of item_enqueue names exactly this predicate.
            models.UniqueConstraint(
                fields=["queue", "key"],
                condition=Q(state__in=list(LIVE_STATES)),
                name="work_items_live_key_uniq",
            ),
            models.CheckConstraint(
                condition=Q(state__in=list(ALL_STATES)),
                name="work_items_state_valid",
            ),
        ]
        indexes = [
            # The claim's order for ready in-process items; partial, so the millions of
            # stopped rows never enter it and it stays small and hot.
            models.Index(
                "queue",
                models.F("priority").desc(),
                "run_after",
                "id",
                condition=Q(state="queued", wire=False),
                name="work_items_claim_idx",
            ),
            # The same order for wire items, per environment (Poll).
            models.Index(
                "environment",
                models.F("priority").desc(),
                "run_after",
                "id",
                condition=Q(state="queued", wire=True),
                name="work_items_poll_idx",
            ),
            # Held items per queue: lapsed-lease reclaim, max_running counts, stuck items. Not
            # on lease_expires_at: held items are few (bounded by the fleet's concurrency), and
            # leaving the lease out of every index lets a renewal, a heartbeat or an operation's
            # progress flush rewrite the row in place (a HOT update) without touching an index.
            models.Index(
                fields=["queue"],
                condition=Q(state__in=list(HELD_STATES)),
                name="work_items_held_idx",
            ),
            # Stopped items by age: reap's retention sweep and the dashboard's last hour.
            models.Index(fields=["stopped_at"], condition=Q(state="stopped"), name="work_items_stopped_idx"),
            # The admin's search by key among the stopped items (the unsettled ones are in the
            # index below): each row version is in one of the two, so a settle adds one entry
            # and a claim none.
            # varchar_pattern_ops: it answers = and a LIKE with a fixed prefix (export:42*) alike.
            models.Index(
                fields=["key"],
                opclasses=["varchar_pattern_ops"],
                condition=Q(state="stopped"),
                name="work_items_stopped_key_idx",
            ),
            # cancel_key finds an unsettled item by key alone, across queues. "key <> ''" (true of
            # every item: keys are never empty) keeps it out of the claim's and the poll's reach:
            # their WHERE implies "state is unsettled" but says nothing of the key, so only
            # work_items_claim_idx, work_items_poll_idx and work_items_held_idx can serve them. With
            # statistics taken while no item was queued, the planner read this index from end to
            # end instead (every unsettled row, filtered), at a quarter of the drain's speed.
            # The statements that read it repeat the predicate ({unsettled_keyed} in SQL,
            # UNSETTLED_KEYED here).
            models.Index(fields=["key"], condition=UNSETTLED_KEYED, name="work_items_unsettled_keyed_idx"),
            # Items of an environment (deleting one checks for them; the admin filters by it).
            models.Index(
                fields=["environment"],
                condition=Q(environment__isnull=False),
                name="work_items_environment_idx",
            ),
            # The admin's search by metadata (account=42): a containment over the items that
            # carry any (most carry none, and those never enter it). jsonb_path_ops: smaller
            # and faster for @>, the one operator the search uses.
            JsonbPathIndex(fields=["metadata"], condition=~Q(metadata={}), name="work_items_metadata_idx"),
            # The admin's error:text search reads the newest failures only, in this order.
            models.Index(
                fields=["stopped_at"],
                condition=Q(state="stopped", outcome="failed"),
                name="work_items_failed_idx",
            ),
            # The wire's list: newest first per environment, keyset on (created_at, id).
            models.Index(
                models.F("environment").asc(),
                models.F("created_at").desc(),
                models.F("id").desc(),
                condition=Q(wire=True),
                name="work_items_wire_list_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.queue}:{self.key} ({self.state})"


class QueueDashboard(WorkItem):
    """The queue dashboard's entry in the admin's app lists (a proxy: no table, no permissions).

    The admin lists registered models only; this entry puts "Queue dashboard" on the admin
    index (and its sidebar) of any site that registers ``workqueue.admin``, with no change to
    the site's ``AdminSite`` or templates.
    """

    class Meta:
        proxy = True
        default_permissions = ()
        verbose_name = verbose_name_plural = "queue dashboard"


class Worker(models.Model):
    """A ``runworker`` process, as it last reported itself."""

    id = models.CharField(primary_key=True, max_length=200)
    host = models.CharField(max_length=255)
    pid = models.IntegerField()
    queues = models.JSONField(default=list)
    state = models.CharField(max_length=16, default="running")
    processed = models.BigIntegerField(default=0)
    failed = models.BigIntegerField(default=0)
    #: What runs its handlers: {"threads": n, "async": n, "processes": n, "children": [pids],
    #: "timeouts": n, "replaced": n, "abandoned": n} (only the parts it has).
    pool = models.JSONField(db_default=models.Value({}, output_field=models.JSONField()), blank=True)
    started_at = models.DateTimeField(db_default=Now())
    last_seen = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "work_workers"
        ordering = ["-last_seen"]

    def __str__(self) -> str:
        return self.id


class Poller(models.Model):
    """A self-hosted worker's latest poll of an environment (feeds ``workers_polling``)."""

    environment = models.ForeignKey(Environment, on_delete=models.CASCADE, related_name="pollers")
    worker_id = models.CharField(max_length=200)
    last_seen = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "work_pollers"
        constraints = [
            models.UniqueConstraint(fields=["environment", "worker_id"], name="work_pollers_env_worker_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.worker_id}@{self.environment_id}"


class ApiKey(models.Model):
    """A control-plane key (``X-Api-Key`` or Bearer) for the wire's metadata/get/stop/stats."""

    name = models.CharField(max_length=200, unique=True)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    key_hint = models.CharField(max_length=16, editable=False)
    created_at = models.DateTimeField(db_default=Now(), editable=False)
    revoked = models.BooleanField(default=False)
    # Set when the key is created as site-wide, never later: a key's scope must not widen by
    # itself (deleting an environment cascades its rows below away, and a scoped key left
    # with none acts on nothing).
    site_wide = models.BooleanField(
        default=False,
        help_text="Valid for every environment (chosen when the key was created; never set later).",
    )
    environments = models.ManyToManyField(
        Environment,
        blank=True,
        related_name="api_keys",
        db_table="work_api_key_environments",
        help_text="The environments this key may act on (a site-wide key acts on every one).",
    )

    class Meta:
        db_table = "work_api_keys"
        verbose_name = "API key"

    def __str__(self) -> str:
        return self.name

    def scope(self) -> str:
        """Where the key is valid, in words: "all environments", the names, or "no environments"
        (a scoped key whose environments were all deleted: the wire refuses it)."""
        if self.site_wide:
            return "all environments"
        return ", ".join(e.name for e in self.environments.all()) or "no environments"


class MaintenanceRun(models.Model):
    """One run of ``recover`` or ``reap``: when, how long, and what it did."""

    name = models.CharField(max_length=32)
    host = models.CharField(max_length=255, blank=True, default="")
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    ok = models.BooleanField(default=True)
    counts = models.JSONField(default=dict)
    error = models.TextField(blank=True, default="")

    class Meta:
        db_table = "work_maintenance_runs"
        ordering = ["-started_at"]
        indexes = [models.Index(fields=["name", "-started_at"], name="work_maint_name_started_idx")]

    def __str__(self) -> str:
        return f"{self.name} at {self.started_at:%Y-%m-%d %H:%M:%S}"


class ScheduleQuerySet(models.QuerySet):
    """Named scopes of schedules; the admin, the dashboard and the command read through these."""

    def active(self):
        """Enabled and still defined: these fire."""
        return self.filter(enabled=True, removed_at__isnull=True)

    def paused(self):
        return self.filter(enabled=False, removed_at__isnull=True)

    def removed(self):
        """Settings schedules no longer in ``WORKQUEUE["SCHEDULES"]`` (kept for their history)."""
        return self.filter(removed_at__isnull=False)

    def due(self):
        return self.active().filter(next_slot__lte=Now())

    def from_settings(self):
        return self.filter(source="settings")


class Schedule(models.Model):
    """Periodic work: what to run, when, and the durable record that makes each slot fire once.

    ``last_slot`` is the exactly-once record: it is advanced in the same transaction as the
    enqueue of the slot's work, and a slot at or before it never fires again. ``next_slot`` is
    the first slot not yet fired (what the scheduler waits for). Both are UTC. The logic lives
    in ``workqueue.schedules``.
    """

    class Target(models.TextChoices):
        ITEM = "item", "work item"
        OPERATION = "operation"
        TASK = "task", "django.tasks task"

    class Misfire(models.TextChoices):
        LATEST = "latest", "latest: run the newest missed slot once"
        ALL = "all", "all: run every missed slot (bounded)"
        SKIP = "skip", "skip: run no missed slot"

    class Source(models.TextChoices):
        SETTINGS = "settings"
        ADMIN = "admin", "admin or command"

    name = models.CharField(max_length=200, unique=True)
    target = models.CharField(max_length=16, choices=Target.choices, default=Target.ITEM)
    queue = models.CharField(max_length=128, blank=True, default="", help_text="Work item: the queue.")
    key_prefix = models.CharField(
        max_length=200, blank=True, default="", help_text="Work item: prepended to the key {name}:{slot}."
    )
    metadata = models.JSONField(default=dict, blank=True, help_text="Work item: string metadata.")
    priority = models.IntegerField(default=0)
    kind = models.CharField(max_length=200, blank=True, default="", help_text="Operation: its kind.")
    request = models.JSONField(null=True, blank=True, help_text="Operation: its request (JSON).")
    task = models.CharField(max_length=300, blank=True, default="", help_text="Task: its dotted path.")
    args = models.JSONField(default=list, blank=True, help_text="Task: its positional arguments (a JSON list).")
    cron = models.CharField(max_length=200, blank=True, default="", help_text="Five-field cron expression.")
    every = models.FloatField(null=True, blank=True, help_text="Interval in seconds (instead of cron).")
    timezone = models.CharField(max_length=64, help_text="IANA time zone the cron expression is read in.")
    misfire = models.CharField(max_length=8, choices=Misfire.choices, default=Misfire.LATEST)
    enabled = models.BooleanField(default=True)
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.ADMIN)
    removed_at = models.DateTimeField(
        null=True, blank=True, help_text="When the schedule left WORKQUEUE['SCHEDULES'] (it no longer fires)."
    )
    last_slot = models.DateTimeField(null=True, blank=True)
    next_slot = models.DateTimeField(null=True, blank=True)
    last_fired_at = models.DateTimeField(null=True, blank=True)
    last_queue = models.CharField(max_length=128, blank=True, default="", help_text="Queue of the last run's work.")
    last_key = models.CharField(max_length=512, blank=True, default="", help_text="Key of the last run's work.")
    last_error = models.TextField(blank=True, default="")
    fired = models.BigIntegerField(default=0, help_text="Runs this schedule has enqueued (slots and run-now).")
    created_at = models.DateTimeField(db_default=Now(), editable=False)
    updated_at = models.DateTimeField(db_default=Now())

    objects = ScheduleQuerySet.as_manager()

    class Meta:
        db_table = "work_schedules"
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=(Q(cron="") & Q(every__gt=0)) | (~Q(cron="") & Q(every__isnull=True)),
                name="work_schedules_cron_xor_every",
            ),
            models.CheckConstraint(
                condition=Q(target__in=["item", "operation", "task"]), name="work_schedules_target_valid"
            ),
            models.CheckConstraint(
                condition=Q(misfire__in=["latest", "all", "skip"]), name="work_schedules_misfire_valid"
            ),
        ]
        indexes = [
            # The firing pass: enabled schedules by next slot (few rows; the order is the pass's).
            models.Index(
                fields=["next_slot", "id"],
                condition=Q(enabled=True, removed_at__isnull=True),
                name="work_schedules_due_idx",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class QueueControl(models.Model):
    """An operator's runtime overrides for one queue (``manage.py queues``, the dashboard).

    A NULL limit means "use the setting" (``WORKQUEUE["QUEUES"][name]``). The claim, poll and
    ack statements read this row themselves, so a change reaches the whole fleet at once.
    A rate is a count per period in seconds (1, 60 or 3600).
    """

    queue = models.CharField(primary_key=True, max_length=128)
    paused = models.BooleanField(default=False)
    max_running = models.IntegerField(null=True, blank=True)
    max_running_per_group = models.IntegerField(null=True, blank=True)
    rate_count = models.IntegerField(null=True, blank=True)
    rate_period = models.FloatField(null=True, blank=True)
    rate_per_group_count = models.IntegerField(null=True, blank=True)
    rate_per_group_period = models.FloatField(null=True, blank=True)
    updated_at = models.DateTimeField(db_default=Now())
    updated_by = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        db_table = "work_queue_controls"
        constraints = [
            models.CheckConstraint(
                condition=Q(max_running__isnull=True) | Q(max_running__gte=1), name="work_queue_controls_max_running"
            ),
            models.CheckConstraint(
                condition=Q(max_running_per_group__isnull=True) | Q(max_running_per_group__gte=1),
                name="work_queue_controls_max_running_per_group",
            ),
            models.CheckConstraint(
                condition=Q(rate_count__isnull=True, rate_period__isnull=True)
                | Q(rate_count__gte=1, rate_period__gt=0),
                name="work_queue_controls_rate",
            ),
            models.CheckConstraint(
                condition=Q(rate_per_group_count__isnull=True, rate_per_group_period__isnull=True)
                | Q(rate_per_group_count__gte=1, rate_per_group_period__gt=0),
                name="work_queue_controls_rate_per_group",
            ),
        ]

    def __str__(self) -> str:
        return self.queue


class QueueStart(models.Model):
    """One start (a claim or a wire ack) of an item of a rate-limited queue: the rate limiter's
    sliding window. Written only for queues with a rate, in the statement that starts the
    item; rows older than the longest period are pruned by the claim and by ``reap``. Facts
    with a time, not a counter: nothing here needs to be kept in step or released."""

    id = models.BigAutoField(primary_key=True)
    queue = models.CharField(max_length=128)
    group_key = models.CharField(max_length=200, null=True, blank=True)
    started_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "work_queue_starts"
        indexes = [
            models.Index(fields=["queue", "started_at"], name="work_queue_starts_queue_idx"),
            models.Index(
                fields=["queue", "group_key", "started_at"],
                condition=Q(group_key__isnull=False),
                name="work_queue_starts_group_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.queue} started at {self.started_at}"


#: Buckets of a QueueStats histogram: bucket b counts durations in [2^(b/2), 2^((b+1)/2)) ms
#: (bucket 0 also everything under a millisecond, the last everything from ~4.6 hours).
HIST_BUCKETS = 48


class IntArrayField(models.Field):
    """A PostgreSQL ``integer[]`` (psycopg reads it as a list), without asking the site to add
    django.contrib.postgres to INSTALLED_APPS for ArrayField."""

    description = "an array of integers"

    def db_type(self, connection) -> str:
        return "integer[]"


class QueueStats(models.Model):
    """A queue's settlements in one minute (``span`` 60) or one hour (``span`` 3600): counts,
    and histograms of the wait (run_after to start) and the run (start to settle) in
    HIST_BUCKETS half-powers of two of milliseconds.

    The rollup (``workqueue.stats``, run by ``recover`` and ``reap``) writes them from the
    stopped items, minutes since the last rolled-up one; the dashboard and its charts read
    them instead of counting history, and read the items only for the minutes since."""

    id = models.BigAutoField(primary_key=True)
    queue = models.CharField(max_length=128)
    span = models.IntegerField()
    period = models.DateTimeField()
    succeeded = models.IntegerField(default=0)
    failed = models.IntegerField(default=0)
    wait_hist = IntArrayField()
    run_hist = IntArrayField()

    class Meta:
        db_table = "work_queue_stats"
        verbose_name_plural = "queue stats"
        constraints = [
            # The rollup's ON CONFLICT target and every read's range (span, then period).
            models.UniqueConstraint(fields=["span", "period", "queue"], name="work_queue_stats_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.queue} at {self.period:%Y-%m-%d %H:%M} ({self.span}s)"
