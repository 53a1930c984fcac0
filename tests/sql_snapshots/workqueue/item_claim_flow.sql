-- item_claim_flow, from workqueue/sql/controls.sql (expanded)
WITH u AS (
    SELECT u.name, u.n AS asked, u.lease_s, u.wire,
           coalesce(c.paused, false) AS paused,
           coalesce(c.max_running, u.cap) AS cap,
           coalesce(c.max_running_per_group, u.group_cap) AS group_cap,
           coalesce(c.rate_count, u.rate_n) AS rate_n,
           CASE WHEN c.rate_count IS NOT NULL THEN c.rate_period ELSE u.rate_s END AS rate_s,
           coalesce(c.rate_per_group_count, u.group_rate_n) AS group_rate_n,
           CASE WHEN c.rate_per_group_count IS NOT NULL THEN c.rate_per_group_period ELSE u.group_rate_s END
               AS group_rate_s
    FROM unnest(%(queues)s::text[], %(limits)s::int[], %(leases)s::float8[], %(caps)s::int[], %(wires)s::bool[],
                %(group_caps)s::int[], %(rate_ns)s::int[], %(rate_ss)s::float8[], %(group_rate_ns)s::int[],
                %(group_rate_ss)s::float8[])
         AS u(name, n, lease_s, cap, wire, group_cap, rate_n, rate_s, group_rate_n, group_rate_s)
    LEFT JOIN work_queue_controls c ON c.queue = u.name
),
q AS (
    SELECT u.*, lim.n,
           CASE WHEN lim.n = 0 THEN 0
                WHEN u.group_cap IS NULL AND u.group_rate_n IS NULL THEN lim.n
                ELSE lim.n * 4 + 8 END AS scan,
           CASE WHEN lim.n = 0 THEN '{}'::text[] ELSE coalesce((
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
               ), '{}'::text[]) END AS blocked
    FROM u CROSS JOIN LATERAL (
        SELECT CASE WHEN u.paused THEN 0 ELSE least(
                   u.asked,
                   CASE WHEN u.cap IS NOT NULL THEN greatest(u.cap - (
                           (SELECT count(*) FROM work_items slot_h
                            WHERE slot_h.queue = u.name AND slot_h.state IN ('starting', 'active', 'stopping')
                              AND slot_h.lease_expires_at > now())
                           + CASE WHEN u.wire
                                  THEN (SELECT count(*) FROM work_items slot_r
                                        WHERE slot_r.queue = u.name AND slot_r.state = 'queued' AND slot_r.wire
                                          AND slot_r.lease_expires_at > now())
                                  ELSE 0 END
                       ), 0) END,
                   CASE WHEN u.rate_n IS NOT NULL
                        THEN greatest(u.rate_n - (
                                (SELECT count(*) FROM work_queue_starts st
                                 WHERE st.queue = u.name AND st.started_at > now() - make_interval(secs => u.rate_s))
                                + CASE WHEN u.wire
                                       THEN (SELECT count(*) FROM work_items st_r
                                             WHERE st_r.queue = u.name AND st_r.state = 'queued' AND st_r.wire
                                               AND st_r.lease_expires_at > now())
                                       ELSE 0 END
                            ), 0) END
               )::int END AS n
    ) AS lim
),
ready AS (
    SELECT c.*, q.name AS queue_name, q.n AS quota, q.lease_s FROM q CROSS JOIN LATERAL (
        SELECT w.id, false AS lapsed, w.priority, w.run_after, w.attempts >= w.max_attempts AS spent, w.group_key
        FROM work_items w
        WHERE w.state = 'queued' AND NOT w.wire AND w.queue = q.name AND w.run_after <= now()
          AND (w.group_key IS NULL OR w.group_key <> ALL (q.blocked))
        ORDER BY w.priority DESC, w.run_after, w.id
        LIMIT q.scan
        FOR UPDATE SKIP LOCKED
    ) AS c
),
lapsed AS (
    SELECT c.*, q.name AS queue_name, q.n AS quota, q.lease_s FROM q CROSS JOIN LATERAL (
        SELECT w.id, true AS lapsed, w.priority, w.run_after, (w.attempts >= w.max_attempts) AS spent, w.group_key
        FROM work_items w
        WHERE w.state IN ('starting', 'active') AND NOT w.wire AND w.queue = q.name
          AND w.lease_expires_at < now()
          AND (w.group_key IS NULL OR w.group_key <> ALL (q.blocked))
        ORDER BY w.lease_expires_at
        LIMIT q.scan
        FOR UPDATE SKIP LOCKED
    ) AS c
),
found AS (
    SELECT * FROM ready UNION ALL SELECT * FROM lapsed
),
held_groups AS (
    SELECT q.name AS queue_name, hg.group_key, hg.held
    FROM q CROSS JOIN LATERAL (SELECT gh.group_key, count(*) AS held FROM (
            SELECT h.group_key FROM work_items h
            WHERE q.group_cap IS NOT NULL AND h.queue = q.name
              AND h.state IN ('starting', 'active', 'stopping') AND h.lease_expires_at > now()
              AND h.group_key IS NOT NULL
            UNION ALL
            SELECT r.group_key FROM work_items r
            WHERE q.group_cap IS NOT NULL AND q.wire AND r.queue = q.name AND r.state = 'queued'
              AND r.wire AND r.lease_expires_at > now() AND r.group_key IS NOT NULL
        ) gh
        GROUP BY gh.group_key) AS hg
    WHERE q.group_cap IS NOT NULL
),
rooms AS (
    SELECT g.queue_name, g.group_key,
           least(
               CASE WHEN q.group_cap IS NOT NULL THEN q.group_cap - coalesce(hg.held, 0) END,
               CASE WHEN q.group_rate_n IS NOT NULL
                    THEN q.group_rate_n
                         - (SELECT count(*) FROM work_queue_starts gs
                            WHERE gs.queue = q.name AND gs.group_key = g.group_key
                              AND gs.started_at > now() - make_interval(secs => q.group_rate_s))
               END
           ) AS room
    FROM (SELECT DISTINCT f.queue_name, f.group_key FROM found f WHERE f.group_key IS NOT NULL) AS g
    JOIN q ON q.name = g.queue_name
    LEFT JOIN held_groups hg ON hg.queue_name = g.queue_name AND hg.group_key = g.group_key
    WHERE q.group_cap IS NOT NULL OR q.group_rate_n IS NOT NULL
),
fitting AS (
    SELECT f.*, r.room,
           row_number() OVER (PARTITION BY f.queue_name, f.group_key ORDER BY f.priority DESC, f.run_after, f.id)
               AS group_rank
    FROM found f LEFT JOIN rooms r ON r.queue_name = f.queue_name AND r.group_key = f.group_key
),
ranked AS (
    SELECT f.*, row_number() OVER (PARTITION BY f.queue_name ORDER BY f.priority DESC, f.run_after, f.id) AS rank
    FROM fitting f
    WHERE f.room IS NULL OR f.group_rank <= f.room
),
candidates AS (
    SELECT * FROM ranked WHERE rank <= quota
    ORDER BY priority DESC, run_after, id
    LIMIT %(limit)s
),
claimed AS (
    UPDATE work_items w
    SET state = 'active', attempts = w.attempts + 1, lease_token = gen_random_uuid(),
        lease_expires_at = now() + make_interval(secs => c.lease_s), started_at = now(),
        claimed_by = %(worker_id)s, reclaimed = c.lapsed,
        attempt_log = CASE WHEN c.lapsed THEN (CASE WHEN jsonb_array_length(w.attempt_log) >= 20 THEN w.attempt_log - 0 ELSE w.attempt_log END)
            || jsonb_build_array(jsonb_build_object(
                   'attempt', w.attempts, 'worker', w.claimed_by, 'started_at', w.started_at, 'ended_at', now(),
                   'outcome', 'lease lapsed'::text, 'error', NULL::text)) ELSE w.attempt_log END
    FROM candidates c
    WHERE w.id = ANY (ARRAY(SELECT id FROM candidates)) AND w.id = c.id AND NOT (c.lapsed AND c.spent)
    RETURNING w.id, w.public_id, w.queue, w.key, w.environment_id, w.state, w.outcome, w.priority, w.run_after,
        w.attempts, w.max_attempts, w.lease_token, w.lease_expires_at, w.reclaimed, w.metadata,
        w.trace_context, w.created_at, NULL::timestamptz AS started_at, w.last_error
),
settled AS (
    UPDATE work_items w
    SET state = CASE WHEN (w.attempts >= w.max_attempts) THEN 'stopped' ELSE 'queued' END,
        outcome = CASE WHEN (w.attempts >= w.max_attempts) THEN 'failed' END,
        stopped_at = CASE WHEN (w.attempts >= w.max_attempts) THEN now() END,
        last_error = CASE WHEN (w.attempts >= w.max_attempts)
                          THEN format(
                                  'lease lapsed on attempt %%s of %%s (the holder died or stalled); attempts are spent, so it is not retried',
                                  w.attempts, w.max_attempts
                              )
                          ELSE w.last_error END,
        lease_token = NULL, lease_expires_at = NULL, reclaimed = true,
        attempt_log = (CASE WHEN jsonb_array_length(w.attempt_log) >= 20 THEN w.attempt_log - 0 ELSE w.attempt_log END)
            || jsonb_build_array(jsonb_build_object(
                   'attempt', w.attempts, 'worker', w.claimed_by, 'started_at', w.started_at, 'ended_at', now(),
                   'outcome', 'lease lapsed'::text, 'error', NULL::text))
    FROM candidates c
    WHERE w.id = ANY (ARRAY(SELECT id FROM candidates)) AND w.id = c.id AND c.lapsed AND c.spent
    RETURNING w.id, w.public_id, w.queue, w.key, w.environment_id, w.state, w.outcome, w.priority, w.run_after,
        w.attempts, w.max_attempts, w.lease_token, w.lease_expires_at, w.reclaimed, w.metadata,
        w.trace_context, w.created_at, NULL::timestamptz AS started_at, w.last_error
),
started AS (
    INSERT INTO work_queue_starts (queue, group_key, started_at)
    SELECT c.queue_name, c.group_key, now()
    FROM candidates c JOIN q ON q.name = c.queue_name
    WHERE NOT (c.lapsed AND c.spent) AND (q.rate_n IS NOT NULL OR q.group_rate_n IS NOT NULL)
),
pruned AS (
    DELETE FROM work_queue_starts s
    USING q
    WHERE s.queue = q.name AND (q.rate_n IS NOT NULL OR q.group_rate_n IS NOT NULL)
      AND s.started_at < now() - make_interval(secs => greatest(coalesce(q.rate_s, 0), coalesce(q.group_rate_s, 0)))
)
SELECT handed.*,
       (SELECT set_config('synchronous_commit', 'off', true)
        WHERE %(relaxed)s::bool AND NOT EXISTS (SELECT 1 FROM settled)) AS relaxed_commit
FROM (SELECT * FROM claimed UNION ALL SELECT * FROM settled) AS handed
ORDER BY handed.priority DESC, handed.run_after, handed.id;
