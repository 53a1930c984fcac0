"""API keys no longer carry last_used_at: nothing wrote it (a write per request would double the cost of auth)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("workqueue", "0002_lean_indexes"),
    ]

    operations = [
        migrations.RemoveField(
            model_name="apikey",
            name="last_used_at",
        ),
    ]
