-- stats_prune, from workqueue/sql/stats.sql (expanded)
DELETE FROM work_queue_stats s
WHERE (s.span = 60 AND s.period < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(minutes_kept)s))
   OR (s.span = 3600 AND s.period < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(hours_kept)s));
