-- queue_flow_wait, from workqueue/sql/controls.sql (expanded)
SELECT min(CASE
           WHEN coalesce(c.paused, false) THEN NULL
           WHEN coalesce(c.rate_count, u.rate_n) IS NOT NULL
                AND (SELECT count(*) FROM work_queue_starts s WHERE s.queue = u.name
                       AND s.started_at > now() - make_interval(secs => coalesce(c.rate_period, u.rate_s)))
                    >= coalesce(c.rate_count, u.rate_n)
           THEN greatest(extract(epoch FROM (
                    SELECT min(s.started_at) FROM work_queue_starts s WHERE s.queue = u.name
                      AND s.started_at > now() - make_interval(secs => coalesce(c.rate_period, u.rate_s))
                ) + make_interval(secs => coalesce(c.rate_period, u.rate_s)) - now())::float8, 0.01)
           ELSE %(recheck)s::float8 END)
FROM unnest(%(queues)s::text[], %(rate_ns)s::int[], %(rate_ss)s::float8[]) AS u(name, rate_n, rate_s)
LEFT JOIN work_queue_controls c ON c.queue = u.name
WHERE EXISTS (
    SELECT 1 FROM work_items w
    WHERE w.state = 'queued' AND NOT w.wire AND w.queue = u.name AND w.run_after <= now()
);
