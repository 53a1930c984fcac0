-- wire_update_metadata, from workqueue/sql/wire.sql (expanded)
UPDATE work_items w
SET metadata = (w.metadata || %(upserts)s::jsonb) - %(deletes)s::text[]
WHERE w.public_id = %(work_id)s AND w.environment_id = %(environment_id)s AND w.wire
  AND (SELECT count(*) FROM jsonb_object_keys((w.metadata || %(upserts)s::jsonb) - %(deletes)s::text[]))
      <= %(max_keys)s
RETURNING w.id, w.public_id, w.queue, w.key, w.environment_id, w.state, w.outcome, w.priority, w.run_after,
    w.attempts, w.max_attempts, w.lease_token, w.lease_expires_at, w.reclaimed, w.metadata,
    w.trace_context, w.created_at, w.started_at, w.last_error, w.claimed_by, w.wire, w.handed_out,
    w.acknowledged_at, w.last_heartbeat_at, w.stop_requested_at, w.stopped_at;
