-- queue_settled_recent, from workqueue/sql/dashboard.sql (expanded)
WITH t AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now)
SELECT w.queue, w.outcome, floor(extract(epoch FROM t.now - w.stopped_at) / 300)::int AS bucket, count(*)
FROM work_items w CROSS JOIN t
WHERE w.state = 'stopped' AND w.stopped_at > t.now - interval '1 hour' AND w.stopped_at <= t.now
  AND w.outcome IN ('succeeded', 'failed')
GROUP BY 1, 2, 3;
