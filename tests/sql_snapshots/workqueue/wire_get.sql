-- wire_get, from workqueue/sql/wire.sql (expanded)
SELECT w.id, w.public_id, w.queue, w.key, w.environment_id, w.state, w.outcome, w.priority, w.run_after,
    w.attempts, w.max_attempts, w.lease_token, w.lease_expires_at, w.reclaimed, w.metadata,
    w.trace_context, w.created_at, w.started_at, w.last_error, w.claimed_by, w.wire, w.handed_out,
    w.acknowledged_at, w.last_heartbeat_at, w.stop_requested_at, w.stopped_at,
       CASE WHEN w.state = 'stopped' OR w.lease_expires_at IS NULL THEN 0
            ELSE greatest(0, ceil(extract(epoch FROM w.lease_expires_at - now())))::int END AS lease_seconds_left
FROM work_items w
WHERE w.public_id = %(work_id)s AND w.environment_id = %(environment_id)s AND w.wire;
