"""The admin's search by request (containment), built concurrently: no wait for writers."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations

import workqueue.indexes


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("operations", "0006_dependencies"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="operation",
            index=workqueue.indexes.JsonbPathIndex(fields=["request"], name="operations_request_idx"),
        ),
    ]
