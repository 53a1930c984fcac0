-- stats_rollup_hours, from workqueue/sql/stats.sql (expanded)
INSERT INTO work_queue_stats (queue, span, period, succeeded, failed, wait_hist, run_hist)
SELECT s.queue, 3600, date_trunc('hour', s.period), sum(s.succeeded), sum(s.failed),
       work_hist_sum(s.wait_hist), work_hist_sum(s.run_hist)
FROM work_queue_stats s
WHERE s.span = 60 AND s.period >= date_trunc('hour', %(since)s::timestamptz)
GROUP BY s.queue, date_trunc('hour', s.period)
ORDER BY 3, 1
ON CONFLICT (span, period, queue) DO UPDATE
SET succeeded = excluded.succeeded, failed = excluded.failed,
    wait_hist = excluded.wait_hist, run_hist = excluded.run_hist;
