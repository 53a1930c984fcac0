"""The index of unsettled items by key gains "key <> ''" in its predicate (true of every item),
so that a claim's or a poll's walk can no longer read it in place of the claim, poll and held
indexes (models.py says why). Built concurrently under its new name before the old one goes,
so cancel-by-key always has an index; no wait for writers either way.

Rollback: ``migrate workqueue 0014`` builds the old index concurrently again and drops this
one."""

from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("workqueue", "0014_stopped_key_index"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="workitem",
            index=models.Index(
                condition=models.Q(
                    ("state__in", ["queued", "starting", "active", "stopping"]),
                    models.Q(("key", ""), _negated=True),
                ),
                fields=["key"],
                name="work_items_unsettled_keyed_idx",
            ),
        ),
        RemoveIndexConcurrently(model_name="workitem", name="work_items_unsettled_key_idx"),
    ]
