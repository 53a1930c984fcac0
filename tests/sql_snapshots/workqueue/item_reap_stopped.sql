-- item_reap_stopped, from workqueue/sql/queries.sql (expanded)
DELETE FROM work_items
WHERE id = ANY(ARRAY(
    SELECT w.id FROM work_items w
    WHERE w.state = 'stopped'
      AND w.stopped_at < coalesce(%(now)s, now()) - make_interval(secs => %(min_retention)s)
      AND w.stopped_at < coalesce(%(now)s, now()) - make_interval(secs => coalesce(
              (SELECT r.retention_s
               FROM unnest(%(queues)s::text[], %(retentions)s::float8[]) AS r(queue, retention_s)
               WHERE r.queue = w.queue),
              %(default_retention)s))
    ORDER BY w.stopped_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
));
