"""A worker's heartbeat says what runs its handlers (threads, event-loop slots, child
processes and their pids): the Workers page shows it. A constant default: no table rewrite."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("workqueue", "0009_connection_losses"),
    ]

    operations = [
        migrations.AddField(
            model_name="worker",
            name="pool",
            field=models.JSONField(blank=True, db_default=models.Value({}, output_field=models.JSONField())),
        ),
    ]
