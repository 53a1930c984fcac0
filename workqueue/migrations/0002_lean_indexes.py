"""Fewer index writes per row version on work_items, which is updated at every step of an item.

- work_items_held_idx leaves lease_expires_at out, so renewing a lease (a keeper's extend, a
  wire heartbeat, an operation's progress flush) is a HOT update that touches no index.
- The environment foreign key gets a partial index over the rows that have one, instead of
  a full index (and its varchar_pattern_ops twin) over a column that is mostly NULL.
- public_id is unique through a named constraint, without the LIKE twin index Django adds to
  unique varchar fields: nothing LIKE-searches ids.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("workqueue", "0001_initial"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="workitem",
            name="work_items_held_idx",
        ),
        migrations.AlterField(
            model_name="workitem",
            name="environment",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="work_items",
                to="workqueue.environment",
            ),
        ),
        migrations.AlterField(
            model_name="workitem",
            name="public_id",
            field=models.CharField(
                db_default=models.Func(models.Value("work_"), function="work_mint_id", output_field=models.CharField()),
                editable=False,
                max_length=64,
            ),
        ),
        migrations.AddIndex(
            model_name="workitem",
            index=models.Index(
                condition=models.Q(("state__in", ["starting", "active", "stopping"])),
                fields=["queue"],
                name="work_items_held_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="workitem",
            index=models.Index(
                condition=models.Q(("environment__isnull", False)),
                fields=["environment"],
                name="work_items_environment_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="workitem",
            constraint=models.UniqueConstraint(fields=("public_id",), name="work_items_public_id_uniq"),
        ),
    ]
