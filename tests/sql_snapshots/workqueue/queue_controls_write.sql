-- queue_controls_write, from workqueue/sql/controls.sql (expanded)
INSERT INTO work_queue_controls AS c (
    queue, paused, max_running, max_running_per_group, rate_count, rate_period,
    rate_per_group_count, rate_per_group_period, updated_at, updated_by
)
VALUES (%(queue)s, coalesce(%(paused)s, false), %(max_running)s, %(max_running_per_group)s, %(rate_count)s,
        %(rate_period)s, %(rate_per_group_count)s, %(rate_per_group_period)s, now(), %(by)s)
ON CONFLICT (queue) DO UPDATE
SET paused = CASE WHEN 'paused' = ANY (%(fields)s::text[]) THEN excluded.paused ELSE c.paused END,
    max_running = CASE WHEN 'max_running' = ANY (%(fields)s::text[]) THEN excluded.max_running
                       ELSE c.max_running END,
    max_running_per_group = CASE WHEN 'max_running_per_group' = ANY (%(fields)s::text[])
                                 THEN excluded.max_running_per_group ELSE c.max_running_per_group END,
    rate_count = CASE WHEN 'rate' = ANY (%(fields)s::text[]) THEN excluded.rate_count ELSE c.rate_count END,
    rate_period = CASE WHEN 'rate' = ANY (%(fields)s::text[]) THEN excluded.rate_period ELSE c.rate_period END,
    rate_per_group_count = CASE WHEN 'rate_per_group' = ANY (%(fields)s::text[])
                                THEN excluded.rate_per_group_count ELSE c.rate_per_group_count END,
    rate_per_group_period = CASE WHEN 'rate_per_group' = ANY (%(fields)s::text[])
                                 THEN excluded.rate_per_group_period ELSE c.rate_per_group_period END,
    updated_at = now(),
    updated_by = excluded.updated_by
RETURNING c.queue, c.paused, c.max_running, c.max_running_per_group, c.rate_count, c.rate_period,
          c.rate_per_group_count, c.rate_per_group_period, c.updated_at, c.updated_by,
          pg_notify(%(channel)s, c.queue), pg_notify(%(channel)s, '#controls');
