"""The admin's search indexes: metadata containment and the newest failures.

Built with CREATE INDEX CONCURRENTLY (outside a transaction): on a table of millions of rows
neither enqueues nor claims wait for the build.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models

import workqueue.indexes


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("workqueue", "0012_attempt_log"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="workitem",
            index=workqueue.indexes.JsonbPathIndex(
                condition=models.Q(("metadata", {}), _negated=True),
                fields=["metadata"],
                name="work_items_metadata_idx",
            ),
        ),
        AddIndexConcurrently(
            model_name="workitem",
            index=models.Index(
                condition=models.Q(("outcome", "failed"), ("state", "stopped")),
                fields=["stopped_at"],
                name="work_items_failed_idx",
            ),
        ),
    ]
