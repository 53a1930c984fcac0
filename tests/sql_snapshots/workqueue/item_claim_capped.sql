-- item_claim_capped, from workqueue/sql/queries.sql (expanded)
WITH q AS (
    SELECT u.name, u.lease_s,
           CASE WHEN EXISTS (
                   SELECT 1 FROM work_queue_controls fg
                   WHERE fg.queue = u.name
                     AND (fg.paused OR fg.max_running IS NOT NULL OR fg.max_running_per_group IS NOT NULL
                          OR fg.rate_count IS NOT NULL OR fg.rate_per_group_count IS NOT NULL)
               ) THEN 0
                WHEN u.cap IS NULL THEN u.n
                ELSE least(u.n, greatest(u.cap - (
                        (SELECT count(*) FROM work_items slot_h
                         WHERE slot_h.queue = u.name AND slot_h.state IN ('starting', 'active', 'stopping')
                           AND slot_h.lease_expires_at > now())
                        + CASE WHEN u.wire
                               THEN (SELECT count(*) FROM work_items slot_r
                                     WHERE slot_r.queue = u.name AND slot_r.state = 'queued' AND slot_r.wire
                                       AND slot_r.lease_expires_at > now())
                               ELSE 0 END
                    ), 0))
           END AS n
    FROM unnest(%(queues)s::text[], %(limits)s::int[], %(leases)s::float8[], %(caps)s::int[], %(wires)s::bool[])
         AS u(name, n, lease_s, cap, wire)
),
ready AS (
    SELECT c.*, q.name AS queue_name, q.n AS quota, q.lease_s FROM q CROSS JOIN LATERAL (
        SELECT w.id, false AS lapsed, w.priority, w.run_after, w.attempts >= w.max_attempts AS spent
        FROM work_items w
        WHERE w.state = 'queued' AND NOT w.wire AND w.queue = q.name AND w.run_after <= now()
        ORDER BY w.priority DESC, w.run_after, w.id
        LIMIT q.n
        FOR UPDATE SKIP LOCKED
    ) AS c
),
lapsed AS (
    SELECT c.*, q.name AS queue_name, q.n AS quota, q.lease_s FROM q CROSS JOIN LATERAL (
        SELECT w.id, true AS lapsed, w.priority, w.run_after, (w.attempts >= w.max_attempts) AS spent
        FROM work_items w
        WHERE w.state IN ('starting', 'active') AND NOT w.wire AND w.queue = q.name
          AND w.lease_expires_at < now()
        ORDER BY w.lease_expires_at
        LIMIT q.n
        FOR UPDATE SKIP LOCKED
    ) AS c
),
ranked AS (
    SELECT b.*, row_number() OVER (PARTITION BY b.queue_name ORDER BY b.priority DESC, b.run_after, b.id) AS rank
    FROM (SELECT * FROM ready UNION ALL SELECT * FROM lapsed) AS b
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
)
SELECT handed.*,
       (SELECT set_config('synchronous_commit', 'off', true)
        WHERE %(relaxed)s::bool AND NOT EXISTS (SELECT 1 FROM settled)) AS relaxed_commit
FROM (SELECT * FROM claimed UNION ALL SELECT * FROM settled) AS handed
ORDER BY handed.priority DESC, handed.run_after, handed.id;
