-- queue_flow_blocked, from workqueue/sql/controls.sql (expanded)
WITH u AS (
    SELECT u.name, true AS wire,
           coalesce(c.paused, false) AS paused,
           coalesce(c.max_running, u.cap) AS cap,
           coalesce(c.max_running_per_group, u.group_cap) AS group_cap,
           coalesce(c.rate_count, u.rate_n) AS rate_n,
           CASE WHEN c.rate_count IS NOT NULL THEN c.rate_period ELSE u.rate_s END AS rate_s,
           coalesce(c.rate_per_group_count, u.group_rate_n) AS group_rate_n,
           CASE WHEN c.rate_per_group_count IS NOT NULL THEN c.rate_per_group_period ELSE u.group_rate_s END
               AS group_rate_s
    FROM unnest(%(queues)s::text[], %(caps)s::int[], %(group_caps)s::int[], %(rate_ns)s::int[],
                %(rate_ss)s::float8[], %(group_rate_ns)s::int[], %(group_rate_ss)s::float8[])
         AS u(name, cap, group_cap, rate_n, rate_s, group_rate_n, group_rate_s)
    LEFT JOIN work_queue_controls c ON c.queue = u.name
),
v AS (
    SELECT u.name,
           u.paused
           OR (u.cap IS NOT NULL AND (
                   (SELECT count(*) FROM work_items slot_h
                    WHERE slot_h.queue = u.name AND slot_h.state IN ('starting', 'active', 'stopping')
                      AND slot_h.lease_expires_at > now())
                   + CASE WHEN true
                          THEN (SELECT count(*) FROM work_items slot_r
                                WHERE slot_r.queue = u.name AND slot_r.state = 'queued' AND slot_r.wire
                                  AND slot_r.lease_expires_at > now())
                          ELSE 0 END
               ) >= u.cap)
           OR (u.rate_n IS NOT NULL AND (
                   (SELECT count(*) FROM work_queue_starts st
                    WHERE st.queue = u.name AND st.started_at > now() - make_interval(secs => u.rate_s))
                   + CASE WHEN true
                          THEN (SELECT count(*) FROM work_items st_r
                                WHERE st_r.queue = u.name AND st_r.state = 'queued' AND st_r.wire
                                  AND st_r.lease_expires_at > now())
                          ELSE 0 END
               ) >= u.rate_n) AS blocked,
           CASE WHEN u.group_cap IS NULL AND u.group_rate_n IS NULL THEN '{}'::text[]
                ELSE coalesce((
                        SELECT array_agg(DISTINCT full_g.group_key) FROM (
                            SELECT held_g.group_key FROM (SELECT gh.group_key, count(*) AS held FROM (
                                    SELECT h.group_key FROM work_items h
                                    WHERE u.group_cap IS NOT NULL AND h.queue = u.name
                                      AND h.state IN ('starting', 'active', 'stopping') AND h.lease_expires_at > now()
                                      AND h.group_key IS NOT NULL
                                    UNION ALL
                                    SELECT r.group_key FROM work_items r
                                    WHERE u.group_cap IS NOT NULL AND u.wire AND r.queue = u.name AND r.state = 'queued'
                                      AND r.wire AND r.lease_expires_at > now() AND r.group_key IS NOT NULL
                                ) gh
                                GROUP BY gh.group_key) AS held_g
                            WHERE held_g.held >= u.group_cap
                            UNION ALL
                            SELECT gs.group_key FROM work_queue_starts gs
                            WHERE u.group_rate_n IS NOT NULL AND gs.queue = u.name
                              AND gs.group_key IS NOT NULL
                              AND gs.started_at > now() - make_interval(secs => u.group_rate_s)
                            GROUP BY gs.group_key HAVING count(*) >= u.group_rate_n
                        ) full_g
                    ), '{}'::text[]) END AS groups
    FROM u
)
SELECT coalesce(array_agg(v.name) FILTER (WHERE v.blocked), '{}'::text[]),
       coalesce((SELECT array_agg(v2.name || chr(31) || g) FROM v AS v2 CROSS JOIN unnest(v2.groups) AS g), '{}'::text[])
FROM v;
