"""The losses in a row of a run's database connection get a column of their own.

Before, the count lived in last_error's text ("… (2 in a row; …)") and was read back with a
regex. A constant default is a catalogue change on PostgreSQL (no table rewrite). The data step
carries over the count of the unsettled items whose last_error holds one, so an item between
two lost connections keeps its place in the row; the reverse step drops the column only (the
text is still in last_error).
"""

from django.db import migrations, models

CARRY_OVER = r"""
UPDATE work_items
SET connection_losses = (substring(last_error from '^database connection lost while running \((\d+) in a row'))::int
WHERE state <> 'stopped' AND last_error LIKE 'database connection lost while running (% in a row%'
"""


class Migration(migrations.Migration):
    dependencies = [
        ("workqueue", "0008_apikey_site_wide"),
    ]

    operations = [
        migrations.AddField(
            model_name="workitem",
            name="connection_losses",
            field=models.PositiveSmallIntegerField(
                db_default=0,
                help_text="Runs in a row that lost their database connection (CONNECTION_LOSS_REFUNDS refunds them).",
            ),
        ),
        migrations.RunSQL(CARRY_OVER, reverse_sql=migrations.RunSQL.noop),
    ]
