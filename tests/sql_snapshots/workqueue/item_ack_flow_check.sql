-- item_ack_flow_check, from workqueue/sql/controls.sql (expanded)
WITH f AS (
    SELECT w.id, w.queue AS name, true AS wire, w.group_key,
           CASE WHEN w.lease_expires_at > now() THEN 1 ELSE 0 END AS own,
           coalesce(c.paused, false) AS paused,
           coalesce(c.max_running, u.cap) AS cap,
           coalesce(c.max_running_per_group, u.group_cap) AS group_cap,
           coalesce(c.rate_count, u.rate_n) AS rate_n,
           CASE WHEN c.rate_count IS NOT NULL THEN c.rate_period ELSE u.rate_s END AS rate_s,
           coalesce(c.rate_per_group_count, u.group_rate_n) AS group_rate_n,
           CASE WHEN c.rate_per_group_count IS NOT NULL THEN c.rate_per_group_period ELSE u.group_rate_s END
               AS group_rate_s
    FROM work_items w
    JOIN unnest(%(queues)s::text[], %(caps)s::int[], %(group_caps)s::int[], %(rate_ns)s::int[],
                %(rate_ss)s::float8[], %(group_rate_ns)s::int[], %(group_rate_ss)s::float8[])
         AS u(name, cap, group_cap, rate_n, rate_s, group_rate_n, group_rate_s) ON u.name = w.queue
    LEFT JOIN work_queue_controls c ON c.queue = w.queue
    WHERE w.public_id = %(work_id)s AND w.environment_id = %(environment_id)s AND w.wire AND w.state = 'queued'
)
SELECT f.name, f.paused,
       f.cap IS NULL OR (
               (SELECT count(*) FROM work_items slot_h
                WHERE slot_h.queue = f.name AND slot_h.state IN ('starting', 'active', 'stopping')
                  AND slot_h.lease_expires_at > now())
               + CASE WHEN true
                      THEN (SELECT count(*) FROM work_items slot_r
                            WHERE slot_r.queue = f.name AND slot_r.state = 'queued' AND slot_r.wire
                              AND slot_r.lease_expires_at > now())
                      ELSE 0 END
           ) - f.own < f.cap AS has_slot,
       f.rate_n IS NULL OR (
               (SELECT count(*) FROM work_queue_starts st
                WHERE st.queue = f.name AND st.started_at > now() - make_interval(secs => f.rate_s))
               + CASE WHEN f.wire
                      THEN (SELECT count(*) FROM work_items st_r
                            WHERE st_r.queue = f.name AND st_r.state = 'queued' AND st_r.wire
                              AND st_r.lease_expires_at > now())
                      ELSE 0 END
           ) - f.own < f.rate_n AS has_rate,
       f.group_key IS NULL OR coalesce(least(
               CASE WHEN f.group_cap IS NOT NULL THEN f.group_cap - (
                   (SELECT count(*) FROM work_items h
                    WHERE h.queue = f.name AND h.group_key = f.group_key
                      AND h.state IN ('starting', 'active', 'stopping') AND h.lease_expires_at > now())
                   + CASE WHEN f.wire
                          THEN (SELECT count(*) FROM work_items r
                                WHERE r.queue = f.name AND r.group_key = f.group_key
                                  AND r.state = 'queued' AND r.wire AND r.lease_expires_at > now())
                          ELSE 0 END
               ) END,
               CASE WHEN f.group_rate_n IS NOT NULL
                    THEN f.group_rate_n
                         - (SELECT count(*) FROM work_queue_starts gs
                            WHERE gs.queue = f.name AND gs.group_key = f.group_key
                              AND gs.started_at > now() - make_interval(secs => f.group_rate_s))
               END
           ) + f.own >= 1, true) AS has_group_room,
       f.rate_n IS NOT NULL OR f.group_rate_n IS NOT NULL AS rated
FROM f;
