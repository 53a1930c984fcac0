"""The admin's search by key (exact, or a prefix) among the stopped items, built concurrently
(no wait for writers)."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("workqueue", "0013_search_indexes"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="workitem",
            index=models.Index(
                condition=models.Q(("state", "stopped")),
                fields=["key"],
                opclasses=["varchar_pattern_ops"],
                name="work_items_stopped_key_idx",
            ),
        ),
    ]
