-- The admin dashboard's statements (see workqueue/dashboard.py). Same conventions as queries.sql.


-- name: queue_stats
-- The dashboard's per-queue counts in one pass over the live part of the table (the partial
-- indexes keep it off the stopped rows), plus the last hour's settlements.
SELECT w.queue,
       count(*) FILTER (WHERE w.state = 'queued' AND w.run_after <= now()
                         AND (w.lease_expires_at IS NULL OR w.lease_expires_at <= now())) AS ready,
       count(*) FILTER (WHERE w.state = 'queued' AND w.run_after > now()) AS scheduled,
       count(*) FILTER (WHERE w.state = 'queued' AND w.lease_expires_at > now()) AS pending,
       count(*) FILTER (WHERE w.state IN ('starting', 'active')) AS running,
       count(*) FILTER (WHERE w.state = 'stopping') AS stopping,
       count(*) FILTER (WHERE w.state IN ('starting', 'active') AND w.lease_expires_at > now()) AS live_held,
       count(*) FILTER (WHERE (w.state IN ('starting', 'active', 'stopping') AND w.lease_expires_at < now())
                          OR (w.state = 'queued'
                              AND w.run_after < now() - make_interval(secs => %(stuck_after)s))) AS stuck,
       min(w.created_at) FILTER (WHERE w.state = 'queued' AND w.run_after <= now()) AS oldest_ready_at
FROM work_items w
WHERE w.state IN ('queued', 'starting', 'active', 'stopping')
GROUP BY w.queue;


-- name: queue_settled_recent
-- Completed and failed per queue per 5-minute bucket over the last hour (the dashboard chart).
SELECT queue, outcome, floor(extract(epoch FROM now() - stopped_at) / 300)::int AS bucket, count(*)
FROM work_items
WHERE state = 'stopped' AND stopped_at > now() - interval '1 hour'
GROUP BY 1, 2, 3;
