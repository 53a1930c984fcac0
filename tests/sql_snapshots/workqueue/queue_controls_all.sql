-- queue_controls_all, from workqueue/sql/controls.sql (expanded)
SELECT c.queue, c.paused, c.max_running, c.max_running_per_group, c.rate_count, c.rate_period,
       c.rate_per_group_count, c.rate_per_group_period, c.updated_at, c.updated_by
FROM work_queue_controls c
ORDER BY c.queue;
