-- stats_rollup_minutes, from workqueue/sql/stats.sql (expanded)
INSERT INTO work_queue_stats (queue, span, period, succeeded, failed, wait_hist, run_hist)
SELECT m.queue, 60, m.period, m.succeeded, m.failed, m.wait_hist, m.run_hist
FROM (SELECT w.queue, date_trunc('minute', w.stopped_at) AS period,
           count(*) FILTER (WHERE w.outcome = 'succeeded') AS succeeded,
           count(*) FILTER (WHERE w.outcome = 'failed') AS failed,
           work_hist(least(47, greatest(0, floor(2 * log(2, greatest((extract(epoch FROM w.started_at - w.run_after)) * 1000, 1)::numeric))::int))) AS wait_hist,
           work_hist(least(47, greatest(0, floor(2 * log(2, greatest((extract(epoch FROM w.stopped_at - w.started_at)) * 1000, 1)::numeric))::int))) AS run_hist
    FROM work_items w
    WHERE w.state = 'stopped' AND w.stopped_at >= %(since)s::timestamptz AND w.stopped_at < %(until)s::timestamptz
    GROUP BY 1, 2) AS m
ORDER BY m.period, m.queue
ON CONFLICT (span, period, queue) DO UPDATE
SET succeeded = excluded.succeeded, failed = excluded.failed,
    wait_hist = excluded.wait_hist, run_hist = excluded.run_hist;
