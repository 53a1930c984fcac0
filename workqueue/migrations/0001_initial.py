"""The workqueue tables.

Why each index on work_items exists (the hot paths must stay index-only or nearly so):
- work_items_live_key_uniq: enqueue is idempotent per (queue, key) while a live item exists;
  item_enqueue's ON CONFLICT names exactly this predicate.
- work_items_claim_idx: the claim's order (priority desc, run_after, id) over ready in-process
  items only; partial, so stopped rows never enter it and it stays small and hot.
- work_items_poll_idx: the same order for wire items, per environment (HTTP Poll).
- work_items_held_idx: held items by lease expiry per queue: lapsed-lease reclaim, the
  max_running count, stuck items, hard timeouts.
- work_items_stopped_idx: reap's retention sweep and the dashboard's last hour.
- work_items_unsettled_key_idx: cancel_key finds unsettled items by key alone.
- work_items_wire_list_idx: the wire's list, newest first, keyset on (created_at, id).

work_mint_id() makes the opaque, time-ordered public ids (work_…, env_…) in SQL, so a
re-hand-out can rotate an id inside the same UPDATE.
"""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.RunSQL(
            sql="""
            CREATE OR REPLACE FUNCTION work_mint_id(prefix text) RETURNS text
            LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
                SELECT prefix
                       || lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000000)::bigint), 14, '0')
                       || substr(md5(gen_random_uuid()::text), 1, 16)
            $$;
            """,
            reverse_sql="DROP FUNCTION IF EXISTS work_mint_id(text);",
        ),
        migrations.CreateModel(
            name="ApiKey",
            fields=[
                (
                    "id",
                    models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID"),
                ),
                ("name", models.CharField(max_length=200, unique=True)),
                ("key_hash", models.CharField(editable=False, max_length=64, unique=True)),
                ("key_hint", models.CharField(editable=False, max_length=16)),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now(), editable=False),
                ),
                ("last_used_at", models.DateTimeField(blank=True, editable=False, null=True)),
                ("revoked", models.BooleanField(default=False)),
            ],
            options={
                "verbose_name": "API key",
                "db_table": "work_api_keys",
            },
        ),
        migrations.CreateModel(
            name="Environment",
            fields=[
                (
                    "id",
                    models.CharField(
                        db_default=models.Func(
                            models.Value("env_"), function="work_mint_id", output_field=models.CharField()
                        ),
                        editable=False,
                        max_length=64,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("name", models.CharField(max_length=200, unique=True)),
                (
                    "kind",
                    models.CharField(choices=[("cloud", "Cloud"), ("self_hosted", "Self Hosted")], max_length=16),
                ),
                ("key_hash", models.CharField(editable=False, max_length=64, unique=True)),
                (
                    "key_hint",
                    models.CharField(editable=False, help_text="The key's first characters.", max_length=16),
                ),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now(), editable=False),
                ),
                ("key_rotated_at", models.DateTimeField(blank=True, editable=False, null=True)),
            ],
            options={
                "db_table": "work_environments",
                "ordering": ["name"],
            },
        ),
        migrations.CreateModel(
            name="Worker",
            fields=[
                ("id", models.CharField(max_length=200, primary_key=True, serialize=False)),
                ("host", models.CharField(max_length=255)),
                ("pid", models.IntegerField()),
                ("queues", models.JSONField(default=list)),
                ("state", models.CharField(default="running", max_length=16)),
                ("processed", models.BigIntegerField(default=0)),
                ("failed", models.BigIntegerField(default=0)),
                ("started_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ("last_seen", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
            options={
                "db_table": "work_workers",
                "ordering": ["-last_seen"],
            },
        ),
        migrations.CreateModel(
            name="MaintenanceRun",
            fields=[
                (
                    "id",
                    models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID"),
                ),
                ("name", models.CharField(max_length=32)),
                ("host", models.CharField(blank=True, default="", max_length=255)),
                ("started_at", models.DateTimeField()),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                ("ok", models.BooleanField(default=True)),
                ("counts", models.JSONField(default=dict)),
                ("error", models.TextField(blank=True, default="")),
            ],
            options={
                "db_table": "work_maintenance_runs",
                "ordering": ["-started_at"],
                "indexes": [models.Index(fields=["name", "-started_at"], name="work_maint_name_started_idx")],
            },
        ),
        migrations.CreateModel(
            name="Poller",
            fields=[
                (
                    "id",
                    models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID"),
                ),
                ("worker_id", models.CharField(max_length=200)),
                ("last_seen", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                (
                    "environment",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="pollers",
                        to="workqueue.environment",
                    ),
                ),
            ],
            options={
                "db_table": "work_pollers",
                "constraints": [
                    models.UniqueConstraint(fields=("environment", "worker_id"), name="work_pollers_env_worker_uniq")
                ],
            },
        ),
        migrations.CreateModel(
            name="WorkItem",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                (
                    "public_id",
                    models.CharField(
                        db_default=models.Func(
                            models.Value("work_"), function="work_mint_id", output_field=models.CharField()
                        ),
                        editable=False,
                        max_length=64,
                        unique=True,
                    ),
                ),
                ("queue", models.CharField(max_length=128)),
                ("key", models.CharField(max_length=512)),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("queued", "Queued"),
                            ("starting", "Starting"),
                            ("active", "Active"),
                            ("stopping", "Stopping"),
                            ("stopped", "Stopped"),
                        ],
                        default="queued",
                        max_length=16,
                    ),
                ),
                (
                    "outcome",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("succeeded", "Succeeded"),
                            ("failed", "Failed"),
                            ("cancelled", "Cancelled"),
                            ("stopped", "Stopped"),
                        ],
                        max_length=16,
                        null=True,
                    ),
                ),
                ("priority", models.IntegerField(default=0)),
                ("run_after", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ("lease_expires_at", models.DateTimeField(blank=True, null=True)),
                ("lease_token", models.UUIDField(blank=True, editable=False, null=True)),
                ("attempts", models.IntegerField(default=0)),
                ("max_attempts", models.IntegerField(default=5)),
                ("reclaimed", models.BooleanField(default=False)),
                (
                    "handed_out",
                    models.BooleanField(default=False, help_text="Handed out over the wire at least once."),
                ),
                (
                    "wire",
                    models.BooleanField(default=False, help_text="Served by HTTP Poll only (self_hosted, over_wire)."),
                ),
                ("last_error", models.TextField(blank=True, db_default="")),
                ("metadata", models.JSONField(blank=True, default=dict)),
                ("trace_context", models.JSONField(blank=True, null=True)),
                ("claimed_by", models.CharField(blank=True, db_default="", max_length=200)),
                ("created_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ("acknowledged_at", models.DateTimeField(blank=True, null=True)),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("last_heartbeat_at", models.DateTimeField(blank=True, null=True)),
                ("stop_requested_at", models.DateTimeField(blank=True, null=True)),
                ("stopped_at", models.DateTimeField(blank=True, null=True)),
                (
                    "environment",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="work_items",
                        to="workqueue.environment",
                    ),
                ),
            ],
            options={
                "db_table": "work_items",
                "ordering": ["-id"],
                "indexes": [
                    models.Index(
                        models.F("queue"),
                        models.OrderBy(models.F("priority"), descending=True),
                        models.F("run_after"),
                        models.F("id"),
                        condition=models.Q(("state", "queued"), ("wire", False)),
                        name="work_items_claim_idx",
                    ),
                    models.Index(
                        models.F("environment"),
                        models.OrderBy(models.F("priority"), descending=True),
                        models.F("run_after"),
                        models.F("id"),
                        condition=models.Q(("state", "queued"), ("wire", True)),
                        name="work_items_poll_idx",
                    ),
                    models.Index(
                        condition=models.Q(("state__in", ["starting", "active", "stopping"])),
                        fields=["queue", "lease_expires_at"],
                        name="work_items_held_idx",
                    ),
                    models.Index(
                        condition=models.Q(("state", "stopped")),
                        fields=["stopped_at"],
                        name="work_items_stopped_idx",
                    ),
                    models.Index(
                        condition=models.Q(("state__in", ["queued", "starting", "active", "stopping"])),
                        fields=["key"],
                        name="work_items_unsettled_key_idx",
                    ),
                    models.Index(
                        models.OrderBy(models.F("environment")),
                        models.OrderBy(models.F("created_at"), descending=True),
                        models.OrderBy(models.F("id"), descending=True),
                        condition=models.Q(("wire", True)),
                        name="work_items_wire_list_idx",
                    ),
                ],
                "constraints": [
                    models.UniqueConstraint(
                        condition=models.Q(("state__in", ["queued", "starting", "active"])),
                        fields=("queue", "key"),
                        name="work_items_live_key_uniq",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("state__in", ["queued", "starting", "active", "stopping", "stopped"])),
                        name="work_items_state_valid",
                    ),
                ],
            },
        ),
        # work_items is updated constantly: leave room on each page for the new row versions,
        # and vacuum/analyze after a small fraction of churn instead of the default 20%.
        migrations.RunSQL(
            sql="""
        ALTER TABLE work_items SET (
            fillfactor = 80,
            autovacuum_vacuum_scale_factor = 0.02,
            autovacuum_vacuum_insert_scale_factor = 0.05,
            autovacuum_analyze_scale_factor = 0.02
        );
        """,
            reverse_sql="ALTER TABLE work_items RESET (fillfactor, autovacuum_vacuum_scale_factor, "
            "autovacuum_vacuum_insert_scale_factor, autovacuum_analyze_scale_factor);",
        ),
    ]
