"""Dependencies: an edge records that its dependency's end was counted on its dependent
(``decided``, the exactly-once marker of op_deps_settle), and recover finds the open edges by
a partial index. A constant default: adding the column rewrites no table.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("operations", "0005_workflows"),
    ]

    operations = [
        migrations.AddField(
            model_name="operationdependency",
            name="decided",
            field=models.BooleanField(db_default=False),
        ),
        migrations.AddIndex(
            model_name="operationdependency",
            index=models.Index(
                condition=models.Q(("decided", False)), fields=["after_id"], name="operation_deps_open_idx"
            ),
        ),
    ]
