"""Leaner indexes for a table every progress flush updates.

- The unfinished-rows index no longer covers updated_at / claimed_until, so a flush (which
  changes only unindexed columns) is a HOT update: the row is rewritten in place and no index
  is touched.
- Django adds a varchar_pattern_ops twin ("..._like") to a varchar primary key for LIKE
  queries; nothing LIKE-searches operation ids, and it would cost a write per row version.
- fillfactor leaves room on each page for those in-place updates.
"""

from django.db import migrations, models

from operations.conf import configured_table

TABLE = configured_table()


class Migration(migrations.Migration):
    dependencies = [
        ("operations", "0001_initial"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="operation",
            name="operations_stranded_idx",
        ),
        migrations.AddIndex(
            model_name="operation",
            index=models.Index(
                condition=models.Q(("state__in", ["pending", "running"])),
                fields=["state"],
                name="operations_unfinished_idx",
            ),
        ),
        migrations.RunSQL(
            sql=f"""
        DO $$
        DECLARE name text;
        BEGIN
            FOR name IN SELECT indexname FROM pg_indexes
                        WHERE tablename = '{TABLE}' AND indexname LIKE '{TABLE}_id_%_like'
            LOOP
                EXECUTE format('DROP INDEX IF EXISTS %I', name);
            END LOOP;
        END $$;
        ALTER TABLE "{TABLE}" SET (fillfactor = 80);
        """,
            reverse_sql=f'ALTER TABLE "{TABLE}" RESET (fillfactor);',
        ),
    ]
