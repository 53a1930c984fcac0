-- schedule_next_due, from workqueue/sql/queries.sql (expanded)
SELECT extract(epoch FROM min(next_slot) - coalesce(%(now)s::timestamptz, now()))::float8
FROM work_schedules
WHERE enabled AND removed_at IS NULL;
