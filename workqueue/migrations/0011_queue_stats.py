"""The per-minute and per-hour rollup of settlements (workqueue.stats): the table, and two
aggregates the rollup statements use: ``work_hist(bucket)`` counts buckets into a histogram of
HIST_BUCKETS integers, ``work_hist_sum(hist)`` adds histograms element by element (an hour from
its minutes). Nothing reads or writes the table on the hot path; dropping it (migrating back)
loses only the charts' history."""

from django.db import migrations, models

import workqueue.models

ZEROS = "{0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0}"

FUNCTIONS = f"""
CREATE OR REPLACE FUNCTION work_hist_add(h int[], b int) RETURNS int[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    IF b IS NOT NULL THEN
        h[b + 1] := h[b + 1] + 1;
    END IF;
    RETURN h;
END
$$;
CREATE OR REPLACE FUNCTION work_hist_merge(a int[], b int[]) RETURNS int[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT array_agg(coalesce(x, 0) + coalesce(y, 0) ORDER BY i) FROM unnest(a, b) WITH ORDINALITY AS t(x, y, i)
$$;
CREATE AGGREGATE work_hist(int) (SFUNC = work_hist_add, STYPE = int[], INITCOND = '{ZEROS}');
CREATE AGGREGATE work_hist_sum(int[]) (SFUNC = work_hist_merge, STYPE = int[], INITCOND = '{ZEROS}');
"""

DROP_FUNCTIONS = """
DROP AGGREGATE IF EXISTS work_hist_sum(int[]);
DROP AGGREGATE IF EXISTS work_hist(int);
DROP FUNCTION IF EXISTS work_hist_merge(int[], int[]);
DROP FUNCTION IF EXISTS work_hist_add(int[], int);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("workqueue", "0010_worker_pool"),
    ]

    operations = [
        migrations.RunSQL(sql=FUNCTIONS, reverse_sql=DROP_FUNCTIONS),
        migrations.CreateModel(
            name="QueueStats",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("queue", models.CharField(max_length=128)),
                ("span", models.IntegerField()),
                ("period", models.DateTimeField()),
                ("succeeded", models.IntegerField(default=0)),
                ("failed", models.IntegerField(default=0)),
                ("wait_hist", workqueue.models.IntArrayField()),
                ("run_hist", workqueue.models.IntArrayField()),
            ],
            options={
                "verbose_name_plural": "queue stats",
                "db_table": "work_queue_stats",
                "constraints": [
                    models.UniqueConstraint(fields=("span", "period", "queue"), name="work_queue_stats_uniq")
                ],
            },
        ),
    ]
