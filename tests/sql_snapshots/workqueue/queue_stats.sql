-- queue_stats, from workqueue/sql/dashboard.sql (expanded)
WITH t AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now)
SELECT w.queue,
       count(*) FILTER (WHERE w.state = 'queued' AND w.run_after <= t.now
                         AND (w.lease_expires_at IS NULL OR w.lease_expires_at <= t.now)) AS ready,
       count(*) FILTER (WHERE w.state = 'queued' AND w.run_after > t.now) AS scheduled,
       count(*) FILTER (WHERE w.state = 'queued' AND w.lease_expires_at > t.now) AS pending,
       count(*) FILTER (WHERE w.state IN ('starting', 'active')) AS running,
       count(*) FILTER (WHERE w.state = 'stopping') AS stopping,
       count(*) FILTER (WHERE (w.state IN ('starting', 'active', 'stopping') AND w.lease_expires_at < t.now)
                          OR (w.state = 'queued' AND w.queue <> ALL (%(held_back)s::text[])
                              AND w.run_after < t.now - make_interval(secs => %(stuck_after)s))) AS stuck,
       count(*) FILTER (WHERE w.state IN ('starting', 'active', 'stopping')
                          AND w.lease_expires_at > t.now) AS live_held,
       extract(epoch FROM t.now - min(w.run_after) FILTER (WHERE w.state = 'queued' AND w.run_after <= t.now))
           AS oldest_wait
FROM work_items w CROSS JOIN t
WHERE w.state IN ('queued', 'starting', 'active', 'stopping') AND w.key <> ''
GROUP BY w.queue, t.now;
