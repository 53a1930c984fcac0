-- item_cancel_key, from workqueue/sql/queries.sql (expanded)
UPDATE work_items AS w
SET state = 'stopped', outcome = 'cancelled', stopped_at = now(),
    stop_requested_at = coalesce(stop_requested_at, now()), lease_token = NULL, lease_expires_at = NULL,
    attempt_log = CASE WHEN w.state IN ('starting', 'active', 'stopping') THEN (CASE WHEN jsonb_array_length(w.attempt_log) >= 20 THEN w.attempt_log - 0 ELSE w.attempt_log END)
        || jsonb_build_array(jsonb_build_object(
               'attempt', w.attempts, 'worker', w.claimed_by, 'started_at', w.started_at, 'ended_at', now(),
               'outcome', 'cancelled'::text, 'error', NULL::text)) ELSE w.attempt_log END
WHERE w.key = %(key)s AND w.state IN ('queued', 'starting', 'active', 'stopping') AND w.key <> ''
  AND (%(queue)s::text IS NULL OR w.queue = %(queue)s)
RETURNING w.id, w.public_id, w.queue, w.key, w.environment_id, w.state, w.outcome, w.priority, w.run_after,
    w.attempts, w.max_attempts, w.lease_token, w.lease_expires_at, w.reclaimed, w.metadata,
    w.trace_context, w.created_at, w.started_at, w.last_error, w.claimed_by, w.wire, w.handed_out,
    w.acknowledged_at, w.last_heartbeat_at, w.stop_requested_at, w.stopped_at;
