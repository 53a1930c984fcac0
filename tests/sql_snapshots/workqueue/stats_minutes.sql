-- stats_minutes, from workqueue/sql/stats.sql (expanded)
WITH t AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now),
seam AS (
    SELECT t.now,
           t.now - make_interval(secs => %(window)s) AS start,
           least(t.now, greatest(
               t.now - make_interval(secs => %(window)s),
               (SELECT max(s.period) + interval '1 minute' FROM work_queue_stats s
                WHERE s.span = 60 AND s.period < t.now)
           )) AS upto
    FROM t
)
SELECT s.queue, s.period, s.succeeded, s.failed, s.wait_hist, s.run_hist
FROM work_queue_stats s, seam
WHERE s.span = 60 AND s.period > seam.start - interval '1 minute' AND s.period < seam.upto
UNION ALL
SELECT m.queue, m.period, m.succeeded, m.failed, m.wait_hist, m.run_hist
FROM (SELECT w.queue, date_trunc('minute', w.stopped_at) AS period,
           count(*) FILTER (WHERE w.outcome = 'succeeded') AS succeeded,
           count(*) FILTER (WHERE w.outcome = 'failed') AS failed,
           work_hist(least(47, greatest(0, floor(2 * log(2, greatest((extract(epoch FROM w.started_at - w.run_after)) * 1000, 1)::numeric))::int))) AS wait_hist,
           work_hist(least(47, greatest(0, floor(2 * log(2, greatest((extract(epoch FROM w.stopped_at - w.started_at)) * 1000, 1)::numeric))::int))) AS run_hist
    FROM work_items w
    WHERE w.state = 'stopped' AND w.stopped_at >= (SELECT greatest(seam.upto, seam.start) FROM seam) AND w.stopped_at < (SELECT seam.now + interval '1 microsecond' FROM seam)
    GROUP BY 1, 2) AS m;
