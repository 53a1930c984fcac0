-- wire_heartbeat, from workqueue/sql/wire.sql (expanded)
UPDATE work_items w
SET state = 'active',
    started_at = CASE WHEN w.state = 'starting' THEN now() ELSE w.started_at END,
    last_heartbeat_at = CASE WHEN w.last_heartbeat_at IS NULL THEN now()
                             ELSE greatest(now(), w.last_heartbeat_at + interval '1 microsecond') END,
    lease_expires_at = now() + make_interval(secs => %(ttl_s)s)
WHERE w.public_id = %(work_id)s AND w.environment_id = %(environment_id)s AND w.wire
  AND CASE WHEN %(claim)s THEN w.state = 'starting' AND w.last_heartbeat_at IS NULL
           ELSE w.state = 'active' AND w.last_heartbeat_at = %(expected)s::timestamptz END
RETURNING w.id, w.public_id, w.queue, w.key, w.environment_id, w.state, w.outcome, w.priority, w.run_after,
    w.attempts, w.max_attempts, w.lease_token, w.lease_expires_at, w.reclaimed, w.metadata,
    w.trace_context, w.created_at, w.started_at, w.last_error, w.claimed_by, w.wire, w.handed_out,
    w.acknowledged_at, w.last_heartbeat_at, w.stop_requested_at, w.stopped_at;
