-- stats_hours, from workqueue/sql/stats.sql (expanded)
SELECT s.queue, s.period, s.succeeded, s.failed, s.wait_hist, s.run_hist
FROM work_queue_stats s
WHERE s.span = 3600
  AND s.period > coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(window)s) - interval '1 hour'
  AND s.period <= coalesce(%(now)s::timestamptz, now())
ORDER BY s.period;
