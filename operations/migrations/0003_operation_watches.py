"""Which operations some process is watching: writes to those (only) send a NOTIFY.

Named after the operations table ("ddb" -> ddb_operations_watches).
"""

from django.db import migrations, models

from operations.conf import configured_table


class Migration(migrations.Migration):
    dependencies = [
        ("operations", "0002_lean_indexes"),
    ]

    operations = [
        migrations.CreateModel(
            name="OperationWatch",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("op_id", models.CharField(max_length=200)),
                ("watcher", models.CharField(max_length=200)),
                ("until", models.DateTimeField()),
            ],
            options={
                "db_table": f"{configured_table()}_watches",
                "constraints": [models.UniqueConstraint(fields=("op_id", "watcher"), name="operation_watches_uniq")],
            },
        ),
    ]
