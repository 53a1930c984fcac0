-- item_claim_one, from workqueue/sql/queries.sql (expanded)
WITH candidates AS (
    SELECT w.id, false AS lapsed, w.priority, w.run_after, w.attempts >= w.max_attempts AS spent,
           w.queue AS queue_name, 1 AS quota, %(lease)s::float8 AS lease_s
    FROM work_items w
    WHERE w.id = %(id)s AND w.state = 'queued' AND NOT w.wire
    FOR UPDATE SKIP LOCKED
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
