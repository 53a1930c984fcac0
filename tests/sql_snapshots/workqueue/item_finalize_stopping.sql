-- item_finalize_stopping, from workqueue/sql/queries.sql (expanded)
UPDATE work_items w
SET state = 'stopped', outcome = coalesce(w.outcome, 'stopped'), stopped_at = now(),
    lease_token = NULL, lease_expires_at = NULL
FROM (
    SELECT id FROM work_items
    WHERE state = 'stopping' AND (lease_expires_at IS NULL OR lease_expires_at < coalesce(%(now)s, now()))
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
) AS s
WHERE w.id = s.id
RETURNING w.id, w.public_id, w.queue, w.key, w.environment_id, w.state, w.outcome, w.priority, w.run_after,
    w.attempts, w.max_attempts, w.lease_token, w.lease_expires_at, w.reclaimed, w.metadata,
    w.trace_context, w.created_at, w.started_at, w.last_error, w.claimed_by, w.wire, w.handed_out,
    w.acknowledged_at, w.last_heartbeat_at, w.stop_requested_at, w.stopped_at;
