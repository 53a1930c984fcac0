"""The operations table.

Its name comes from OPERATIONS["TABLE_PREFIX"] ("ddb" -> ddb_operations), read the same way
the model reads it, so the migration state always matches the model.

Why each index exists:
- operations_owner_idx: the HTTP list, scoped to one owner, newest first (keyset pages).
- operations_state_idx / operations_kind_idx: the admin's filters and counts, newest first.
- operations_stranded_idx: recover's sweep over the unfinished rows only (pending by age,
  running by lease).
- operations_reap_idx: reap's sweep over terminal rows by finished_at.
"""

import django.db.models.functions.datetime
from django.db import migrations, models

from operations.conf import configured_table


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        # The operations statements move work_items rows in the same statement.
        ("workqueue", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="Operation",
            fields=[
                ("id", models.CharField(max_length=200, primary_key=True, serialize=False)),
                ("kind", models.CharField(max_length=128)),
                ("owner", models.CharField(blank=True, db_default="", max_length=200)),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("pending", "Pending"),
                            ("running", "Running"),
                            ("succeeded", "Succeeded"),
                            ("failed", "Failed"),
                            ("cancelled", "Cancelled"),
                        ],
                        db_default="pending",
                        max_length=16,
                    ),
                ),
                ("queue", models.CharField(db_default="operations", max_length=128)),
                ("priority", models.IntegerField(db_default=0)),
                ("request", models.JSONField(blank=True, null=True)),
                ("units_total", models.IntegerField(blank=True, null=True)),
                ("units_done", models.IntegerField(db_default=0)),
                ("unit", models.CharField(blank=True, db_default="", max_length=1024)),
                ("message", models.CharField(blank=True, db_default="", max_length=1024)),
                ("count_label", models.CharField(blank=True, db_default="", max_length=64)),
                ("count", models.BigIntegerField(db_default=0)),
                ("result_uri", models.TextField(blank=True, db_default="")),
                ("result_detail", models.JSONField(blank=True, null=True)),
                ("error_code", models.CharField(blank=True, db_default="", max_length=128)),
                ("error_message", models.CharField(blank=True, db_default="", max_length=1024)),
                ("error_retryable", models.BooleanField(blank=True, null=True)),
                ("attempts", models.IntegerField(db_default=0)),
                ("max_attempts", models.IntegerField(db_default=5)),
                (
                    "attempt_log",
                    models.JSONField(blank=True, db_default=models.Value([], output_field=models.JSONField())),
                ),
                ("cancel_requested", models.BooleanField(db_default=False)),
                ("revision", models.BigIntegerField(db_default=1)),
                ("claimed_until", models.DateTimeField(blank=True, null=True)),
                ("lease_token", models.UUIDField(blank=True, editable=False, null=True)),
                ("worker_id", models.CharField(blank=True, db_default="", max_length=200)),
                ("created_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ("updated_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
            ],
            options={
                "db_table": configured_table(),
                "ordering": ["-created_at", "-id"],
                "indexes": [
                    models.Index(
                        models.F("owner"),
                        models.OrderBy(models.F("created_at"), descending=True),
                        models.OrderBy(models.F("id"), descending=True),
                        name="operations_owner_idx",
                    ),
                    models.Index(
                        models.F("state"),
                        models.OrderBy(models.F("created_at"), descending=True),
                        models.OrderBy(models.F("id"), descending=True),
                        name="operations_state_idx",
                    ),
                    models.Index(
                        models.F("kind"),
                        models.OrderBy(models.F("created_at"), descending=True),
                        models.OrderBy(models.F("id"), descending=True),
                        name="operations_kind_idx",
                    ),
                    models.Index(
                        condition=models.Q(("state__in", ["pending", "running"])),
                        fields=["state", "updated_at", "claimed_until"],
                        name="operations_stranded_idx",
                    ),
                    models.Index(
                        condition=models.Q(("state__in", ["succeeded", "failed", "cancelled"])),
                        fields=["finished_at"],
                        name="operations_reap_idx",
                    ),
                ],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("state__in", ["pending", "running", "succeeded", "failed", "cancelled"])),
                        name="operations_state_valid",
                    )
                ],
            },
        ),
    ]
