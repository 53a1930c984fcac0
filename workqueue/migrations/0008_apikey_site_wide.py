"""A site-wide API key is an explicit flag, set when the key is created (issue 25, item 1).

Before, a key with no rows in work_api_key_environments was site-wide, so deleting the last
environment of a scoped key (the rows cascade away) silently made it valid everywhere. The
data step keeps every existing key's meaning: a key with no environment rows today is
site-wide today, so it gets the flag; every other key stays scoped, and from now on a scoped
key whose environments are all gone is refused.
"""

from django.db import migrations, models


def mark_site_wide(apps, schema_editor):
    ApiKey = apps.get_model("workqueue", "ApiKey")
    db = schema_editor.connection.alias
    ApiKey.objects.using(db).filter(environments__isnull=True).update(site_wide=True)


def unmark(apps, schema_editor):
    pass  # the column goes; a key with no rows reads as site-wide again, as before


class Migration(migrations.Migration):
    dependencies = [
        ("workqueue", "0007_queue_controls"),
    ]

    operations = [
        migrations.AddField(
            model_name="apikey",
            name="site_wide",
            field=models.BooleanField(
                default=False,
                help_text="Valid for every environment (chosen when the key was created; never set later).",
            ),
        ),
        migrations.AlterField(
            model_name="apikey",
            name="environments",
            field=models.ManyToManyField(
                blank=True,
                db_table="work_api_key_environments",
                help_text="The environments this key may act on (a site-wide key acts on every one).",
                related_name="api_keys",
                to="workqueue.environment",
            ),
        ),
        migrations.RunPython(mark_site_wide, unmark, elidable=False),
    ]
