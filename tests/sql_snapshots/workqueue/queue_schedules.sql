-- queue_schedules, from workqueue/sql/dashboard.sql (expanded)
SELECT coalesce(nullif(queue, ''), nullif(last_queue, '')) AS q, count(*)
FROM work_schedules
WHERE enabled AND removed_at IS NULL
GROUP BY 1;
