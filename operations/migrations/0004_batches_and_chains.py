"""Batches and chains: a child names its parent (and its place), a parent tallies its children.

The new columns have constant defaults, so adding them rewrites no table. Why each index:
operations_children_idx pages a parent's children in order (admin, HTTP), finds them for a
cancel and lets reap delete them with their parent; operations_fan_in_due_idx is recover's
list of children that ended without being counted on their parent (empty but for a crash).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("operations", "0003_operation_watches"),
    ]

    operations = [
        migrations.AddField(
            model_name="operation",
            name="children_cancelled",
            field=models.IntegerField(db_default=0),
        ),
        migrations.AddField(
            model_name="operation",
            name="children_failed",
            field=models.IntegerField(db_default=0),
        ),
        migrations.AddField(
            model_name="operation",
            name="children_succeeded",
            field=models.IntegerField(db_default=0),
        ),
        migrations.AddField(
            model_name="operation",
            name="children_total",
            field=models.IntegerField(db_default=0),
        ),
        migrations.AddField(
            model_name="operation",
            name="fanned_in",
            field=models.BooleanField(db_default=False),
        ),
        migrations.AddField(
            model_name="operation",
            name="follows_id",
            field=models.CharField(blank=True, max_length=200, null=True),
        ),
        migrations.AddField(
            model_name="operation",
            name="parent_id",
            field=models.CharField(blank=True, max_length=200, null=True),
        ),
        migrations.AddField(
            model_name="operation",
            name="position",
            field=models.IntegerField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name="operation",
            index=models.Index(
                condition=models.Q(("parent_id__isnull", False)),
                fields=["parent_id", "position"],
                name="operations_children_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="operation",
            index=models.Index(
                condition=models.Q(
                    ("fanned_in", False),
                    ("parent_id__isnull", False),
                    ("state__in", ["succeeded", "failed", "cancelled"]),
                ),
                fields=["finished_at"],
                name="operations_fan_in_due_idx",
            ),
        ),
    ]
