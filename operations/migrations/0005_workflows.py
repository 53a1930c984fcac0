"""Workflows and dependencies: the steps a workflow run recorded, the signals sent to it,
and the edges of ``start(..., after=[ids])``; on the operation, what a workflow waits for and
its dependencies' tally.

The new columns have constant defaults, so adding them rewrites no table. The tables are
named after the operations table ("ddb" -> ddb_operations_steps).
"""

import django.db.models.functions.datetime
from django.db import migrations, models

from operations.conf import configured_table


class Migration(migrations.Migration):
    dependencies = [
        ("operations", "0004_batches_and_chains"),
    ]

    operations = [
        migrations.CreateModel(
            name="OperationDependency",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("op_id", models.CharField(max_length=200)),
                ("after_id", models.CharField(max_length=200)),
            ],
            options={
                "db_table": f"{configured_table()}_dependencies",
            },
        ),
        migrations.CreateModel(
            name="OperationSignal",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("op_id", models.CharField(max_length=200)),
                ("name", models.CharField(max_length=200)),
                ("payload", models.JSONField(blank=True, null=True)),
                ("sent_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ("taken_at", models.DateTimeField(blank=True, null=True)),
                ("taken_by_position", models.IntegerField(blank=True, null=True)),
            ],
            options={
                "db_table": f"{configured_table()}_signals",
                "ordering": ["op_id", "id"],
            },
        ),
        migrations.CreateModel(
            name="OperationStep",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("op_id", models.CharField(max_length=200)),
                ("position", models.IntegerField()),
                ("name", models.CharField(max_length=200)),
                ("kind", models.CharField(db_default="step", max_length=16)),
                ("state", models.CharField(db_default="running", max_length=16)),
                ("attempts", models.IntegerField(db_default=0)),
                ("started_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                ("wake_at", models.DateTimeField(blank=True, null=True)),
                ("result", models.JSONField(blank=True, null=True)),
                ("error", models.JSONField(blank=True, null=True)),
                ("copied", models.BooleanField(db_default=False)),
            ],
            options={
                "db_table": f"{configured_table()}_steps",
                "ordering": ["op_id", "position"],
            },
        ),
        migrations.AddField(
            model_name="operation",
            name="deps_open",
            field=models.IntegerField(db_default=0),
        ),
        migrations.AddField(
            model_name="operation",
            name="forked_from_id",
            field=models.CharField(blank=True, max_length=200, null=True),
        ),
        migrations.AddField(
            model_name="operation",
            name="has_dependents",
            field=models.BooleanField(db_default=False),
        ),
        migrations.AddField(
            model_name="operation",
            name="wait_kind",
            field=models.CharField(blank=True, db_default="", max_length=16),
        ),
        migrations.AddField(
            model_name="operation",
            name="wait_name",
            field=models.CharField(blank=True, db_default="", max_length=200),
        ),
        migrations.AddField(
            model_name="operation",
            name="wake_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="operation",
            name="wake_pending",
            field=models.BooleanField(db_default=False),
        ),
        migrations.AddField(
            model_name="operation",
            name="workflow",
            field=models.BooleanField(db_default=False),
        ),
        migrations.AddIndex(
            model_name="operation",
            index=models.Index(
                condition=models.Q(("state", "pending"), models.Q(("wait_kind", ""), _negated=True)),
                fields=["wake_at"],
                name="operations_waiting_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="operationdependency",
            index=models.Index(fields=["op_id"], name="operation_dependencies_op_idx"),
        ),
        migrations.AddConstraint(
            model_name="operationdependency",
            constraint=models.UniqueConstraint(fields=("after_id", "op_id"), name="operation_dependencies_uniq"),
        ),
        migrations.AddIndex(
            model_name="operationsignal",
            index=models.Index(
                condition=models.Q(("taken_at__isnull", True)),
                fields=["op_id", "name", "id"],
                name="operation_signals_open_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="operationsignal",
            index=models.Index(fields=["op_id", "id"], name="operation_signals_op_idx"),
        ),
        migrations.AddConstraint(
            model_name="operationstep",
            constraint=models.UniqueConstraint(fields=("op_id", "position"), name="operation_steps_uniq"),
        ),
    ]
