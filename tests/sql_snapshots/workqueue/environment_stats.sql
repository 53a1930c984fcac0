-- environment_stats, from workqueue/sql/dashboard.sql (expanded)
WITH t AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now)
SELECT e.id, e.name, d.depth, d.pending, p.polling,
       (SELECT count(*) FROM work_environments x WHERE x.kind = 'self_hosted') AS total
FROM work_environments e CROSS JOIN t
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE w.run_after <= t.now
                              AND (w.lease_expires_at IS NULL OR w.lease_expires_at <= t.now)) AS depth,
           count(*) FILTER (WHERE w.lease_expires_at > t.now) AS pending
    FROM work_items w
    WHERE w.environment_id = e.id AND w.state = 'queued' AND w.wire
) AS d
CROSS JOIN LATERAL (
    SELECT count(*) AS polling FROM work_pollers p
    WHERE p.environment_id = e.id AND p.last_seen >= t.now - make_interval(secs => %(window)s)
) AS p
WHERE e.kind = 'self_hosted'
ORDER BY e.name
LIMIT %(limit)s;
