-- item_requeue_lapsed, from workqueue/sql/queries.sql (expanded)
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
               'outcome', 'lease lapsed'::text, 'error', NULL::text)),
    public_id = CASE WHEN (w.attempts >= w.max_attempts) THEN w.public_id ELSE work_mint_id('work_') END,
    acknowledged_at = NULL, started_at = NULL, last_heartbeat_at = NULL
FROM (
    SELECT id FROM work_items
    WHERE state IN ('starting', 'active') AND wire AND lease_expires_at < coalesce(%(now)s, now())
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
) AS s
WHERE w.id = s.id
RETURNING w.id, w.public_id, w.queue, w.key, w.environment_id, w.state, w.outcome, w.priority, w.run_after,
    w.attempts, w.max_attempts, w.lease_token, w.lease_expires_at, w.reclaimed, w.metadata,
    w.trace_context, w.created_at, w.started_at, w.last_error, w.claimed_by, w.wire, w.handed_out,
    w.acknowledged_at, w.last_heartbeat_at, w.stop_requested_at, w.stopped_at;
