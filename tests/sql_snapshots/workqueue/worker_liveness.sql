-- worker_liveness, from workqueue/sql/dashboard.sql (expanded)
WITH t AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now)
SELECT q.queue,
       count(*) FILTER (WHERE k.last_seen >= t.now - make_interval(secs => %(stale_after)s)) AS alive,
       count(*) FILTER (WHERE k.last_seen < t.now - make_interval(secs => %(stale_after)s)) AS stale
FROM work_workers k CROSS JOIN t CROSS JOIN LATERAL jsonb_array_elements_text(k.queues) AS q(queue)
WHERE k.state <> 'stopped'
GROUP BY q.queue
UNION ALL
SELECT NULL,
       count(*) FILTER (WHERE k.last_seen >= t.now - make_interval(secs => %(stale_after)s)),
       count(*) FILTER (WHERE k.last_seen < t.now - make_interval(secs => %(stale_after)s))
FROM work_workers k CROSS JOIN t
WHERE k.state <> 'stopped';
