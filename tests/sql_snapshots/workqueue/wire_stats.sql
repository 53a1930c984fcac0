-- wire_stats, from workqueue/sql/wire.sql (expanded)
SELECT e.id, s.depth, s.pending, s.oldest_queued_at, p.workers_polling
FROM work_environments e
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE w.run_after <= now()
                              AND (w.lease_expires_at IS NULL OR w.lease_expires_at <= now())) AS depth,
           count(*) FILTER (WHERE w.lease_expires_at > now()) AS pending,
           min(w.created_at) FILTER (WHERE w.run_after <= now() OR w.lease_expires_at > now()) AS oldest_queued_at
    FROM work_items w
    WHERE w.environment_id = e.id AND w.wire AND w.state = 'queued'
) AS s
CROSS JOIN LATERAL (
    SELECT count(*) AS workers_polling
    FROM work_pollers pl
    WHERE pl.environment_id = e.id AND pl.last_seen > now() - make_interval(secs => %(window_s)s)
) AS p
WHERE e.kind = 'self_hosted' AND (%(environment_id)s::text IS NULL OR e.id = %(environment_id)s)
ORDER BY e.id;
