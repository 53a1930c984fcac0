"""The admin's list, newest first, through an index (built concurrently: no wait for writers)."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("operations", "0007_search_indexes"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="operation",
            index=models.Index(models.F("created_at").desc(), models.F("id").desc(), name="operations_created_idx"),
        ),
    ]
