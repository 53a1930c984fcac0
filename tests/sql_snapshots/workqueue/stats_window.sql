-- stats_window, from workqueue/sql/stats.sql (expanded)
WITH t AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now)
SELECT greatest(
           (SELECT max(s.period) + interval '1 minute' FROM work_queue_stats s WHERE s.span = 60),
           date_trunc('minute', t.now - make_interval(secs => %(backfill)s))
       ) AS since,
       date_trunc('minute', t.now - make_interval(secs => %(lag)s)) AS until
FROM t;
