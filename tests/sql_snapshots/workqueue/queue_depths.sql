-- queue_depths, from workqueue/sql/controls.sql (expanded)
SELECT w.queue, count(*)
FROM work_items w
WHERE w.state = 'queued' AND w.run_after <= now() AND (w.lease_expires_at IS NULL OR w.lease_expires_at <= now())
GROUP BY w.queue;
