-- wire_stop, from workqueue/sql/wire.sql (expanded)
UPDATE work_items w
SET state = CASE WHEN %(force)s OR w.state IN ('queued', 'starting') THEN 'stopped' ELSE 'stopping' END,
    outcome = CASE WHEN %(force)s OR w.state IN ('queued', 'starting') THEN coalesce(w.outcome, 'stopped')
                   ELSE w.outcome END,
    stop_requested_at = coalesce(w.stop_requested_at, now()),
    stopped_at = CASE WHEN %(force)s OR w.state IN ('queued', 'starting') THEN now() END,
    lease_token = CASE WHEN %(force)s OR w.state IN ('queued', 'starting') THEN NULL ELSE w.lease_token END,
    lease_expires_at = CASE WHEN %(force)s OR w.state IN ('queued', 'starting') THEN NULL
                            ELSE w.lease_expires_at END
WHERE w.public_id = %(work_id)s AND w.environment_id = %(environment_id)s AND w.wire
  AND CASE WHEN %(force)s THEN w.state <> 'stopped'
           ELSE w.state IN ('queued', 'starting', 'active') END
RETURNING w.id, w.public_id, w.queue, w.key, w.environment_id, w.state, w.outcome, w.priority, w.run_after,
    w.attempts, w.max_attempts, w.lease_token, w.lease_expires_at, w.reclaimed, w.metadata,
    w.trace_context, w.created_at, w.started_at, w.last_error, w.claimed_by, w.wire, w.handed_out,
    w.acknowledged_at, w.last_heartbeat_at, w.stop_requested_at, w.stopped_at;
